package com.example.shop;

final class PriceCalculator {
    private PriceCalculator() {}

    static long total(Cart cart) {
        return cart.lines().stream().mapToLong(line -> lineTotal(line)).sum();
    }

    private static long lineTotal(Cart.Line line) {
        checkPrice(line);
        return line.unitPrice * line.quantity;
    }

    private static void checkPrice(Cart.Line line) {
        if (line.unitPrice < 0) {
            throw new IllegalStateException("negative price for " + line.name);
        }
    }
}
