package com.example.shop;

/** Entry point: builds a cart with one bad item and checks it out. */
public final class ShopApp {
    public static void main(String[] args) {
        new ShopApp().run(args.length);
    }

    void run(int orderNumber) {
        Cart cart = new Cart();
        cart.add(new Cart.Line("book", 1200, 2));
        cart.add(new Cart.Line("pen", -5, 1));
        try {
            new Checkout(cart).submit();
        } catch (IllegalStateException e) {
            throw new CheckoutFailedException("order " + orderNumber + " failed", e);
        }
    }
}
