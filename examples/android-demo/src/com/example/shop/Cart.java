package com.example.shop;

import java.util.ArrayList;
import java.util.List;

final class Cart {
    static final class Line {
        final String name;
        final long unitPrice;
        final int quantity;

        Line(String name, long unitPrice, int quantity) {
            this.name = name;
            this.unitPrice = unitPrice;
            this.quantity = quantity;
        }
    }

    private final List<Line> lines = new ArrayList<>();

    void add(Line line) {
        lines.add(line);
    }

    List<Line> lines() {
        return lines;
    }
}
