CREATE TABLE items (
    id      INTEGER PRIMARY KEY,
    sku     TEXT NOT NULL UNIQUE,
    name    TEXT NOT NULL,
    price   NUMERIC NOT NULL CHECK (price >= 0)
);
