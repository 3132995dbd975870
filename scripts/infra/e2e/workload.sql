-- Streamed workload of the end-to-end run (scripts/e2e.sh), run after the
-- connector's snapshot. Statements outside BEGIN/COMMIT are their own
-- transactions. `\echo phase N` lines let e2e.sh inject its fault while
-- the workload is still running (after phase 2 starts).
\set ON_ERROR_STOP on
SELECT setseed(0.9);
\echo phase 1

-- Inserts in multi-row transactions.
BEGIN;
SELECT app.insert_customers(100, 399);
COMMIT;
BEGIN;
INSERT INTO app.order_lines (order_id, line_no, sku, qty, price, shipped)
SELECT o, l, 'SKU-' || (o * 10 + l), (random() * 9)::int + 1, round((random() * 999)::numeric, 2), random() < 0.3
FROM generate_series(100, 299) o, generate_series(1, 4) l;
COMMIT;
INSERT INTO app.documents (id, title, body, blob, updated_at)
SELECT d, 'doc ' || d,
       (SELECT string_agg(md5(random()::text || d || g), '') FROM generate_series(1, 400) g),
       CASE WHEN d % 3 = 0 THEN NULL ELSE (SELECT decode(string_agg(md5(random()::text || d || g), ''), 'hex') FROM generate_series(1, 150) g) END,
       timestamptz '2024-02-01 00:00:00+00' + d * interval '1 minute'
FROM generate_series(10, 49) d;
INSERT INTO app.sessions SELECT s, s * 10, timestamptz '2024-03-01 00:00:00+00' + s * interval '1 second', gen_random_uuid()
FROM generate_series(6, 60) s;
-- Many small transactions, one row each.
DO $$
BEGIN
  FOR g IN 400..449 LOOP
    PERFORM app.insert_customers(g, g);
    COMMIT;
  END LOOP;
END $$;
SELECT pg_sleep(0.5);
\echo phase 2

-- Updates: FULL identity (customers), default identity (order_lines).
UPDATE app.customers SET c_text = 'updated ' || id, c_int = c_int / 2, c_jsonb = c_jsonb || '{"v": 2}',
  c_text_array = ARRAY['u', id::text], c_timestamptz = c_timestamptz + interval '1 day 1 microsecond'
WHERE id % 3 = 0 AND id > 99;
UPDATE app.customers SET c_numeric = NULL, c_bool = NULL, c_date = NULL, c_uuid = NULL, c_bytea = NULL
WHERE id % 10 = 1 AND id > 99;
UPDATE app.customers SET c_bytea = '\xdeadbeef', c_int_array = '{}', c_real = 0.1, c_double = 0.1 WHERE id = 23;
BEGIN;
UPDATE app.order_lines SET qty = qty + 1, shipped = true WHERE order_id % 5 = 0;
UPDATE app.order_lines SET price = price * 2 WHERE line_no = 2 AND order_id < 150;
COMMIT;

-- TOAST: updates that leave body and blob alone, then some that rewrite them.
UPDATE app.documents SET title = title || ' (edited)', version = version + 1, updated_at = updated_at + interval '1 day';
UPDATE app.documents SET version = version + 1 WHERE id % 4 = 0;
UPDATE app.documents SET body = 'short body ' || id, version = version + 1 WHERE id % 7 = 0;
UPDATE app.documents SET blob = NULL WHERE id = 11;
UPDATE app.documents SET blob = decode(repeat('ab', 5000), 'hex') WHERE id = 12;

-- Primary-key changes (delete of the old key + create of the new one).
UPDATE app.order_lines SET line_no = line_no + 100 WHERE order_id % 17 = 0 AND line_no = 1;
UPDATE app.customers SET id = id + 100000 WHERE id % 50 = 0;
UPDATE app.documents SET id = id + 1000 WHERE id = 20;
-- Key changes of documents rows whose TOASTed body the update leaves
-- alone (22, 23; 20 is deleted below): with default replica identity the
-- new key's create event carries body as __debezium_unavailable_value and
-- names the old key in its __debezium.oldkey header; cdcapply fills body
-- from the old key's row. customers (REPLICA IDENTITY FULL) changes keys
-- of rows with an out-of-line c_note above.
UPDATE app.documents SET id = id + 1000 WHERE id IN (22, 23);
UPDATE app.customers SET c_tstz_array = c_tstz_array || now(), c_numeric_array = NULL WHERE id % 11 = 2;

-- Deletes, then a revival of a deleted key.
DELETE FROM app.customers WHERE id % 13 = 0;
DELETE FROM app.order_lines WHERE order_id % 9 = 0 AND line_no = 3;
DELETE FROM app.documents WHERE id % 5 = 0;
INSERT INTO app.customers (id, c_text) VALUES (13, 'revived');
INSERT INTO app.documents (id, title, body) VALUES (15, 'revived doc', repeat('r', 5000));

-- Truncate, then rows again, some under keys that existed before it.
TRUNCATE app.sessions;
INSERT INTO app.sessions SELECT s, s * 100, timestamptz '2024-04-01 00:00:00+00' + s * interval '1 hour', gen_random_uuid()
FROM generate_series(50, 70) s;

-- A column added mid-stream, nullable without default (a default would
-- fill existing rows in PostgreSQL without any change event).
ALTER TABLE app.order_lines ADD COLUMN note text;
INSERT INTO app.order_lines (order_id, line_no, sku, qty, price, note)
SELECT o, 1, 'SKU-N' || o, 1, 9.99, 'with note ' || o FROM generate_series(300, 309) o;
UPDATE app.order_lines SET note = 'late note' WHERE order_id IN (100, 101) AND line_no = 2;
ALTER TABLE app.customers ADD COLUMN c_added numeric(8, 3);
UPDATE app.customers SET c_added = id / 7.0 WHERE id % 8 = 0;
\echo phase 3

-- The hot key: thousands of updates, one transaction each (with pauses so
-- the stream keeps flowing during the fault), then many in one transaction.
DO $$
BEGIN
  FOR i IN 1..3000 LOOP
    UPDATE app.counters SET n = n + 1, touched = touched + interval '1 second' WHERE id = 1;
    COMMIT;
    IF i % 100 = 0 THEN
      UPDATE app.customers SET c_int = coalesce(c_int, 0) + 1 WHERE id = 101;
      COMMIT;
      PERFORM pg_sleep(0.1);
    END IF;
  END LOOP;
END $$;
BEGIN;
DO $$
BEGIN
  FOR i IN 1..1000 LOOP
    UPDATE app.counters SET n = n + 1, touched = touched + interval '1 millisecond' WHERE id = 2;
  END LOOP;
END $$;
COMMIT;

-- One transaction that inserts, updates, deletes and re-inserts the same
-- keys across tables.
BEGIN;
SELECT app.insert_customers(900, 905);
UPDATE app.customers SET c_text = 'in tx' WHERE id BETWEEN 900 AND 905;
DELETE FROM app.customers WHERE id IN (901, 903);
INSERT INTO app.customers (id, c_text, c_added) VALUES (903, 're-inserted in tx', 1.5);
INSERT INTO app.order_lines (order_id, line_no, sku, qty, price) VALUES (900, 1, 'SKU-TX', 1, 1.00);
UPDATE app.order_lines SET qty = 5 WHERE order_id = 900;
DELETE FROM app.order_lines WHERE order_id = 900;
INSERT INTO app.order_lines (order_id, line_no, sku, qty, price, note) VALUES (900, 1, 'SKU-TX2', 2, 2.00, 'again');
UPDATE app.sessions SET user_id = NULL, token = NULL WHERE id = 50;
COMMIT;
\echo workload done
