-- Recompute stock levels from movements (a task a workflow step can run).
SELECT sku, on_hand FROM stock_levels ORDER BY sku;
