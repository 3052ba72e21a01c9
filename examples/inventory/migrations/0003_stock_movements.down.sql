DROP VIEW stock_levels;
DROP INDEX stock_movements_item;
DROP TABLE stock_movements;
