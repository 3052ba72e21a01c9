SELECT sku, name, on_hand FROM stock_levels WHERE on_hand < 50 ORDER BY on_hand;
