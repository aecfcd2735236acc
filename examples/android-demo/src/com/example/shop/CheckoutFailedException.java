package com.example.shop;

public final class CheckoutFailedException extends RuntimeException {
    CheckoutFailedException(String message, Throwable cause) {
        super(message, cause);
    }
}
