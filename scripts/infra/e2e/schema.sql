-- Source schema of the end-to-end run (scripts/e2e.sh): an application's
-- tables in schema `app`, created before the connector starts, with a few
-- rows each that Debezium reads in its snapshot (op "r"). Every table has
-- snapshot rows, so every change topic exists before cdcapply starts.
--
--   customers    every common column type; REPLICA IDENTITY FULL
--   order_lines  composite primary key; default replica identity; a column
--                is added mid-stream; a primary-key change
--   documents    default replica identity; large TOASTed text and bytea
--                that most updates leave unchanged
--   counters     the hot key (thousands of updates)
--   sessions     truncated mid-stream, then refilled
--   markers      the end marker e2e.sh waits for
\set ON_ERROR_STOP on
SELECT setseed(0.8);

DROP SCHEMA IF EXISTS app CASCADE;
CREATE SCHEMA app;

CREATE TABLE app.customers (
  id             bigint PRIMARY KEY,
  c_smallint     smallint,
  c_int          integer,
  c_bigint       bigint,
  c_real         real,
  c_double       double precision,
  c_numeric      numeric(12, 4),
  c_numeric_var  numeric,
  c_bool         boolean,
  c_text         text,
  c_varchar      varchar(40),
  c_char         char(5),
  c_date         date,
  c_timestamp    timestamp,
  c_timestamp3   timestamp(3),
  c_timestamptz  timestamptz,
  c_time         time,
  c_interval     interval,
  c_uuid         uuid,
  c_json         json,
  c_jsonb        jsonb,
  c_bytea        bytea,
  c_int_array    integer[],
  c_text_array   text[],
  c_uuid_array   uuid[],
  c_numeric_array numeric(10, 2)[],
  c_date_array   date[],
  c_tstz_array   timestamptz[],
  -- Large text out of line on a FULL identity table: updates that leave
  -- it alone still carry it only as unchanged TOAST in the new image.
  c_note         text
);
ALTER TABLE app.customers REPLICA IDENTITY FULL;
ALTER TABLE app.customers ALTER COLUMN c_note SET STORAGE EXTERNAL;

CREATE TABLE app.order_lines (
  order_id  bigint        NOT NULL,
  line_no   integer       NOT NULL,
  sku       varchar(20)   NOT NULL,
  qty       integer       NOT NULL,
  price     numeric(10, 2) NOT NULL,
  shipped   boolean       NOT NULL DEFAULT false,
  PRIMARY KEY (order_id, line_no)
);

CREATE TABLE app.documents (
  id          integer PRIMARY KEY,
  title       text    NOT NULL,
  body        text,
  blob        bytea,
  version     integer NOT NULL DEFAULT 1,
  updated_at  timestamptz NOT NULL DEFAULT now()
);
-- Stored out of line and uncompressed: a value over ~2 KB is TOASTed, and
-- an update that leaves it alone makes Debezium send
-- __debezium_unavailable_value (default replica identity).
ALTER TABLE app.documents ALTER COLUMN body SET STORAGE EXTERNAL;
ALTER TABLE app.documents ALTER COLUMN blob SET STORAGE EXTERNAL;

CREATE TABLE app.counters (
  id       integer PRIMARY KEY,
  n        bigint  NOT NULL,
  touched  timestamptz NOT NULL
);

CREATE TABLE app.sessions (
  id       integer PRIMARY KEY,
  user_id  bigint,
  started  timestamptz,
  token    uuid
);

CREATE TABLE app.markers (
  id     integer PRIMARY KEY,
  token  text NOT NULL
);

-- new_customer(id): a row with random values in every column, some null.
CREATE FUNCTION app.rand_text(n integer) RETURNS text LANGUAGE sql AS $$
  SELECT string_agg(substr('abcdefghij klmnopqrstuvwxyzäöüé€漢字"\''\,{}', (random() * 44)::int + 1, 1), '')
  FROM generate_series(1, n)
$$;

CREATE FUNCTION app.insert_customers(first bigint, last bigint) RETURNS void LANGUAGE sql AS $$
  INSERT INTO app.customers
  SELECT g,
         (random() * 65535 - 32768)::int::smallint,
         (random() * 4294967295 - 2147483648)::bigint::integer,
         (random() * 9.2e18 - 4.6e18)::bigint,
         (random() * 2000 - 1000)::real,
         random() * 1e6 - 5e5,
         round((random() * 2e8 - 1e8)::numeric, 4),
         CASE WHEN g % 7 = 0 THEN NULL ELSE round((random() * 1e12)::numeric, (g % 19)::int) END,
         CASE WHEN g % 11 = 0 THEN NULL ELSE random() < 0.5 END,
         app.rand_text((random() * 60)::int),
         left(app.rand_text(40), 40),
         left(app.rand_text(3), 3),
         date '2000-01-01' + (random() * 20000)::int,
         timestamp '1990-01-01' + random() * interval '40 years',
         timestamp '1990-01-01' + random() * interval '40 years',
         timestamptz '1990-01-01 00:00:00+00' + random() * interval '40 years',
         time '00:00' + random() * interval '24 hours',
         make_interval(0, (random() * 30)::int, 0, (random() * 40)::int, (random() * 23)::int, 0, round((random() * 59)::numeric, 6)::float8),
         gen_random_uuid(),
         CASE WHEN g % 5 = 0 THEN NULL ELSE json_build_object('n', g, 'tags', json_build_array('a', g % 3), 'ok', g % 2 = 0) END,
         jsonb_build_object('g', g, 'r', round(random()::numeric, 3), 'nested', jsonb_build_object('x', app.rand_text(5))),
         CASE WHEN g % 6 = 0 THEN NULL ELSE decode(md5(g::text), 'hex') END,
         ARRAY[g::int, (random() * 100)::int, -1],
         CASE WHEN g % 4 = 0 THEN NULL ELSE ARRAY['x' || g, app.rand_text(4), ''] END,
         ARRAY[gen_random_uuid()],
         CASE WHEN g % 3 = 0 THEN NULL ELSE ARRAY[round((random() * 1000)::numeric, 2), NULL, -0.01] END,
         ARRAY[date '1970-01-01' + g::int, date '1969-12-31' - g::int],
         ARRAY[timestamptz '1969-12-31 23:59:59.999999+00' - g * interval '1.5 second', now()],
         CASE WHEN g % 2 = 0 THEN (SELECT string_agg(md5(g::text || i), ' ') FROM generate_series(1, 100) i) ELSE 'short ' || g END
  FROM generate_series(first, last) g
$$;

SELECT app.insert_customers(1, 20);
-- Edge values: infinities, extremes, nulls everywhere but the key.
INSERT INTO app.customers (id, c_smallint, c_int, c_bigint, c_real, c_double, c_numeric, c_numeric_var,
  c_bool, c_text, c_varchar, c_char, c_date, c_timestamp, c_timestamp3, c_timestamptz, c_time, c_interval,
  c_uuid, c_json, c_jsonb, c_bytea, c_int_array, c_text_array)
VALUES
  (21, -32768, -2147483648, -9223372036854775808, 'Infinity', '-Infinity', -99999999.9999,
   -0.000000000000000000001, false, '', '', '', 'infinity', '-infinity', 'infinity', 'infinity',
   '00:00:00', '0', '00000000-0000-0000-0000-000000000000', '[]', '{}', '\x', '{}', '{}'),
  (22, 32767, 2147483647, 9223372036854775807, 'NaN', 'NaN', 99999999.9999,
   123456789012345678901234567890.123456789, true, 'line1
line2	tab', 'x', 'abcde', '0001-01-01', '0001-01-01 00:00:00', '2038-01-19 03:14:07.999',
   '1970-01-01 00:00:00+00', '23:59:59.999999', '-1 year -2 days +03:04:05.000006',
   'ffffffff-ffff-ffff-ffff-ffffffffffff', '{"a" : [1, 2.50, null],  "b":"\u00e9"}', '{"z": 1, "a": [true, 1.50]}',
   '\x00ff00', '{1,NULL,3}', '{"with space","with,comma",NULL}');
INSERT INTO app.customers (id, c_date) VALUES (23, '-infinity');
-- Pre-1970 instants with fractions (negative epoch values that must floor,
-- not truncate), control characters, 4-byte UTF-8, escapes in json text,
-- arrays with nulls and empty arrays of every array column.
INSERT INTO app.customers (id, c_real, c_double, c_numeric, c_numeric_var, c_text, c_varchar, c_char,
  c_date, c_timestamp, c_timestamp3, c_timestamptz, c_time, c_interval, c_json, c_jsonb, c_bytea,
  c_int_array, c_text_array, c_uuid_array, c_numeric_array, c_date_array, c_tstz_array, c_note)
VALUES
  (24, -0.0, 1e-300, 0.0001, 1e-20, E'ctl \x01\x1f\x7f nul-free \u2028 emoji \U0001F600 end', E'tab\there',
   E'\U0001F600', '1969-12-31', '1969-12-31 23:59:59.999999', '1969-12-31 23:59:59.001',
   '1969-12-31 23:59:59.5+00', '00:00:00.000001', '1 mon 1 microsecond',
   E'{"e": "\\ud83d\\ude00", "ctl": "\\u0001", "q": "\\""}', E'{"e": "\U0001F600", "k": "\\u0001"}',
   '\x00', '{NULL}', '{NULL,""}', '{}', '{}', '{}', '{}', E'\U0001F600'),
  (25, 1.17549435e-38, 1.7976931348623157e308, -0.0001, -1e20, repeat('x', 3000), NULL, NULL,
   '1900-02-28', '1900-01-01 00:00:00.000001', '1066-10-14 09:00:00.5', '1583-01-01 00:00:00.25+00',
   '12:00:00', '-1 years -2 mons -3 days -04:05:06.5', 'null', '"a string"', decode(repeat('ff', 3000), 'hex'),
   '{-2147483648,2147483647}', '{"{","}",",","\"","\\"}', '{00000000-0000-0000-0000-000000000001,NULL}',
   '{99999999.99,-99999999.99,0.00}', '{infinity,-infinity,2000-02-29}', '{infinity,"1900-01-01 00:00:00.000001+00"}',
   repeat('toasted ', 1000));

INSERT INTO app.order_lines (order_id, line_no, sku, qty, price)
SELECT o, l, 'SKU-' || (o * 10 + l), l, round((random() * 500)::numeric, 2)
FROM generate_series(1, 5) o, generate_series(1, 3) l;

INSERT INTO app.documents (id, title, body, blob, updated_at)
SELECT d, 'doc ' || d,
       (SELECT string_agg(md5(random()::text || d || g), '') FROM generate_series(1, 300) g),
       (SELECT decode(string_agg(md5(random()::text || d || g), ''), 'hex') FROM generate_series(1, 200) g),
       timestamptz '2024-01-01 00:00:00+00' + d * interval '1 hour'
FROM generate_series(1, 3) d;

INSERT INTO app.counters VALUES (1, 0, '2024-01-01 00:00:00+00'), (2, 0, '2024-01-01 00:00:00+00');
INSERT INTO app.sessions SELECT s, s * 10, timestamptz '2024-01-01 00:00:00+00' + s * interval '1 minute', gen_random_uuid()
FROM generate_series(1, 5) s;
INSERT INTO app.markers VALUES (0, 'snapshot');
