DROP INDEX items_supplier;
ALTER TABLE items DROP COLUMN supplier_id;
DROP TABLE suppliers;
