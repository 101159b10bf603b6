-- Schema + initial (snapshot) rows for the demo.  Run in database dbzdemo.
CREATE EXTENSION IF NOT EXISTS hstore;
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');

-- many types, REPLICA IDENTITY DEFAULT (primary key)
CREATE TABLE public.typed (
  id    int PRIMARY KEY,
  i2    smallint,
  i8    bigint,
  b     boolean,
  f4    real,
  f8    double precision,
  n     numeric(10,3),
  nu    numeric,
  m     money,
  vc    varchar(20),
  ch    char(5),
  t     text,
  ba    bytea,
  d     date,
  tm    time,
  tmtz  timetz,
  ts    timestamp,
  tstz  timestamptz,
  iv    interval,
  u     uuid,
  js    json,
  jb    jsonb,
  x     xml,
  ia    int[],
  ta    text[],
  hs    hstore,
  ip    inet,
  mo    mood,
  ts3   timestamp(3),
  tm0   time(0),
  bt    bit(3),
  pt    point,
  dflt  int DEFAULT 42
);

-- REPLICA IDENTITY FULL
CREATE TABLE public.full_t (id int PRIMARY KEY, v text, n numeric(6,2));
ALTER TABLE public.full_t REPLICA IDENTITY FULL;

-- TOAST, REPLICA IDENTITY DEFAULT and FULL
CREATE TABLE public.toast_t (id int PRIMARY KEY, big text, other int);
CREATE TABLE public.toast_full (id int PRIMARY KEY, big text, other int);
ALTER TABLE public.toast_full REPLICA IDENTITY FULL;

-- no primary key (REPLICA IDENTITY FULL so UPDATE/DELETE are allowed)
CREATE TABLE public.nokey (a int, b text);
ALTER TABLE public.nokey REPLICA IDENTITY FULL;

-- composite primary key
CREATE TABLE public.ck (k1 int, k2 text, v int, PRIMARY KEY (k1, k2));

-- special values (NaN, infinities, big numerics) - streamed at the end
CREATE TABLE public.special_t (id int PRIMARY KEY, nu numeric, n numeric(10,3), f8 double precision,
                               d date, ts timestamp, tstz timestamptz);

INSERT INTO public.typed VALUES
 (1, 1, 10000000000, true, 1.5, 2.25, 1234.567, 3.14159265358979323846, 12.34,
  'vc one', 'ab', 'text one', '\x0001ff'::bytea, '2024-01-15', '13:45:30.123456', '13:45:30.5+02',
  '2024-01-15 13:45:30.123456', '2024-01-15 13:45:30.123456+02', '1 year 2 mons 3 days 04:05:06.789',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": 1, "b": [1, 2]}', '{"b": [1, 2], "a": 1}',
  '<r>x</r>', '{1,2,3}', '{"x","y z",NULL}', 'k1=>v1, k2=>NULL', '192.168.0.1/24', 'happy',
  '2024-01-15 13:45:30.123', '13:45:30', B'101', '(1.5,-2)', DEFAULT),
 (2, -2, -9000000000, false, -0.25, -1e300, -0.001, 100, -1.00,
  'vc two', 'abcde', 'text two', ''::bytea, '1970-01-01', '00:00:00', '23:59:59-05',
  '1970-01-01 00:00:00', '1970-01-01 00:00:00+00', '-1 days', '00000000-0000-0000-0000-000000000000',
  '[]', '{}', '<a/>', '{}', '{}', '', '::1', 'sad',
  '1970-01-01 00:00:00', '00:00:00', B'000', '(0,0)', 7),
 (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL);

INSERT INTO public.full_t VALUES (1, 'full one', 1.10), (2, 'full two', 2.20);
-- 400 md5 hex strings = 12800 chars: stored out of line (TOASTed), pglz cannot shrink it enough
INSERT INTO public.toast_t VALUES (1, (SELECT string_agg(md5(g::text), '') FROM generate_series(1,400) g), 1);
INSERT INTO public.toast_full VALUES (1, (SELECT string_agg(md5(g::text), '') FROM generate_series(1,400) g), 1);
INSERT INTO public.nokey VALUES (1, 'nk one');
INSERT INTO public.ck VALUES (1, 'a', 100);

-- kept outside the publication; used to refill typed for the alternative-mode snapshots
CREATE TABLE public.typed_saved AS SELECT * FROM public.typed;

CREATE PUBLICATION dbz_pub FOR TABLE public.typed, public.full_t, public.toast_t, public.toast_full,
  public.nokey, public.ck, public.special_t;
