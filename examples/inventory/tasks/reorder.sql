INSERT INTO stock_movements (item_id, quantity, reason)
SELECT i.id, 100, 'receipt' FROM items i JOIN stock_levels s ON s.sku = i.sku WHERE s.on_hand < 50;
