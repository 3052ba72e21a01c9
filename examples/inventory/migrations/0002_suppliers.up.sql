CREATE TABLE suppliers (
    id    INTEGER PRIMARY KEY,
    name  TEXT NOT NULL UNIQUE
);
ALTER TABLE items ADD COLUMN supplier_id INTEGER REFERENCES suppliers (id);
CREATE INDEX items_supplier ON items (supplier_id);
