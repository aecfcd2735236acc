package com.example.shop;

final class Checkout {
    private final Cart cart;

    Checkout(Cart cart) {
        this.cart = cart;
    }

    void submit() {
        long total = PriceCalculator.total(cart);
        System.out.println("charging " + total);
    }
}
