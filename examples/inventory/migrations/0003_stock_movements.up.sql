CREATE TABLE stock_movements (
    id        INTEGER PRIMARY KEY,
    item_id   INTEGER NOT NULL REFERENCES items (id),
    quantity  INTEGER NOT NULL CHECK (quantity <> 0),
    reason    TEXT NOT NULL CHECK (reason IN ('receipt', 'sale', 'adjustment'))
);
CREATE INDEX stock_movements_item ON stock_movements (item_id);
CREATE VIEW stock_levels AS
    SELECT i.sku, i.name, coalesce(sum(m.quantity), 0) AS on_hand
    FROM items i LEFT JOIN stock_movements m ON m.item_id = i.id
    GROUP BY i.id;
