INSERT INTO suppliers (id, name) VALUES (1, 'Northwind Metals'), (2, 'Harbor Plastics');
INSERT INTO items (id, sku, name, price, supplier_id) VALUES
    (1, 'BOLT-M8', 'Hex bolt M8', 0.12, 1),
    (2, 'NUT-M8', 'Hex nut M8', 0.05, 1),
    (3, 'CRATE-S', 'Small crate', 4.50, 2);
INSERT INTO stock_movements (item_id, quantity, reason) VALUES
    (1, 500, 'receipt'), (2, 800, 'receipt'), (3, 40, 'receipt'), (1, -120, 'sale'), (3, -2, 'adjustment');
