//! The type tests' corpus: two tables that hold a column of every built-in type (and an
//! enum, a domain, a composite), with ordinary and edge values — NULLs, NaN and
//! infinities, the ends of each range, BC dates, empty and multi-dimensional arrays with
//! bounds. The type tests check pgcdc's values against Postgres's output functions; the
//! Debezium comparison checks its Debezium encoding against Debezium's.

/// `public.mood` (enum), `public.posint` (domain) and `public.all_types` (primary key `id`).
pub const ALL_TYPES_SCHEMA: &str = "
CREATE TYPE public.mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN public.posint AS int CHECK (VALUE > 0);
CREATE TABLE public.all_types (
  id int PRIMARY KEY,
  b bool, i2 int2, i4 int4, i8 int8, o oid,
  f4 float4, f8 float8, n numeric, n_big numeric, n_scaled numeric(12,4),
  t text, vc varchar(20), bp char(5), nm name, ch \"char\",
  by bytea,
  d date, tm time, ttz timetz, ts timestamp, tstz timestamptz,
  iv interval, u uuid, j json, jb jsonb,
  a_i4 int4[], a_t text[], a_2d int8[], a_n numeric[], a_ts timestamptz[], a_box box[],
  mood public.mood, pi public.posint, inet_v inet, range_v int4range, bits bit varying(8), money_v money,
  pt point, xml_v xml, tsv tsvector
);
";

/// Four rows of `public.all_types`, ids 1–4 (the last all NULL).
pub const ALL_TYPES_ROWS: &str = "
INSERT INTO public.all_types VALUES
 (1, true, -32768, -2147483648, -9223372036854775808, 4294967295,
  'NaN', 'Infinity', 'NaN', (repeat('9', 1000) || '.' || repeat('1', 500))::numeric, -12.3400,
  'plain', 'varchar', 'ab', 'name', 'x',
  '\\xdeadbeef00',
  'infinity', '24:00:00', '23:59:59.999999+05:30', '-infinity', 'infinity',
  '1 year 2 mons 3 days 04:05:06.789', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"b\": 1,  \"a\": [1, 2]}', '{\"b\": 1, \"a\": [1, 2.50]}',
  '{1,NULL,3}', '{\"with space\",\"quote\\\"d\",NULL,\"\",\"NULL\",\"comma,\"}', '{{1,2},{3,4}}', '{1.5,NaN,-0.001}', '{\"2024-01-01 00:00:00+00\",infinity}', '{(1,2),(3,4);(5,6),(7,8)}',
  'happy', 42, '192.168.0.1/24', '[1,10)', B'1011', 12.34,
  '(1.5,2)', '<a>x</a>', 'fat:2 cat:1'),
 (2, false, 32767, 2147483647, 9223372036854775807, 0,
  '-Infinity', '-Infinity', 'Infinity', '-0.000000000000000000000000000000000001', 0,
  '', 'é ü 中文 🎉', 'abcde', '', ' ',
  '\\x',
  '0044-03-15 BC', '00:00:00', '00:00:00-08', '0001-01-01 00:00:00 BC', '12345-06-07 08:09:10.5+00',
  '-1 years -2 mons +3 days -00:00:00.000001', '00000000-0000-0000-0000-000000000000', 'null', '\"string\"',
  '{}', '{}', '[0:1][5:6]={{1,2},{3,4}}', '{-Infinity}', '{}', '{}',
  'sad', 1, '::1', 'empty', B'', -5,
  '(0,0)', '', ''),
 (3, NULL, 1, 2, 3, 4,
  1.5, 0.1, '-Infinity', '1e-30', 99999999.9999,
  'line1\nline2\ttab\\\\', NULL, NULL, NULL, NULL,
  NULL,
  '2024-02-29', '12:34:56.000001', NULL, '2000-01-01 00:00:00', '1999-12-31 23:59:59.999999+00',
  '00:00:00', NULL, '[]', '{}',
  '{NULL}', '{NULL,NULL}', NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL),
 (4, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL,
  NULL,
  NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL);
";

/// `public.pair` (composite), `public.inet_d` and `public.xml_d` (domains) and
/// `public.more_types` (primary key `id`): network, XML, bit, money, range, multirange,
/// composite and geometric types, and time values at their ends.
pub const MORE_TYPES_SCHEMA: &str = r#"
CREATE TYPE public.pair AS (a int, b text);
CREATE DOMAIN public.inet_d AS inet;
CREATE DOMAIN public.xml_d AS xml;
CREATE TABLE public.more_types (
  id int PRIMARY KEY,
  inet_v inet, cidr_v cidr, mac macaddr, mac8 macaddr8, inet_d public.inet_d, a_inet inet[],
  xml_v xml, xml_d public.xml_d,
  bit_v bit(4), varbit_v varbit, a_bit bit(2)[],
  money_v money, a_money money[],
  r_int int4range, r_num numrange, r_ts tsrange, r_tstz tstzrange, r_date daterange, a_range int8range[],
  mr int4multirange, mr_tstz tstzmultirange,
  comp public.pair, a_comp public.pair[],
  pt point, ln line, ls lseg, bx box, pth path, pg polygon, ci circle, a_pt point[],
  tstz timestamptz, ts timestamp, iv interval, f8 float8, f4 float4, by bytea, d date, ttz timetz,
  a_tstz timestamptz[], a_iv interval[]
);
"#;

/// Three rows of `public.more_types`, ids 1–3 (the last all NULL).
pub const MORE_TYPES_ROWS: &str = r#"INSERT INTO public.more_types VALUES
 (1, '::1', '10.0.0.0/8', '08:00:2b:01:02:03', '08:00:2b:01:02:03:04:05', '10.1.2.3', '{::1,10.1.2.3/32,192.168.0.1/24}',
  '<?xml version="1.0"?><r/>', '<?xml version="1.0"?><d>1</d>',
  B'1010', B'101', '{10,01}',
  1234.56, '{1.5,-2}',
  '[1,10)', '(0.5,1.25]', '["2024-01-01 10:00","2024-01-02")', '["2024-01-01 00:00:00+00","2024-06-01 12:30:00.5+02")', '[2000-02-29,2000-03-01]', '{"[1,2)",empty}',
  '{[1,3),[5,7)}', '{["2024-01-01 00:00+00","2024-01-02 00:00+00")}',
  '(1,"x y")', '{"(1,a)","(,)"}',
  '(0.30000000000000004,1)', '{1,2,3}', '[(0,0),(1,1)]', '(1,1),(0,0)', '[(0,0),(1,1),(2,0)]', '((0,0),(1,1),(1,0))', '<(0,0),1.5>', '{"(0.1,0.2)"}',
  '2000-02-29 12:00:00.123456+00', '2400-02-29 23:59:59', '1 year 2 mons -3 days 04:05:06.5', 0.30000000000000004, 0.1, '\x00ff5c', '2000-02-29', '12:00:00+05:30',
  '{"1600-02-29 00:00:00+00",infinity}', '{"-1 days +00:00:01",P1Y}'),
 (2, '2001:db8::ff00:42:8329/64', '2001:db8::/32', NULL, NULL, '::ffff:1.2.3.4', '{}',
  '<a>x</a>', 'plain text',
  B'0000', B'', '{}',
  -0.01, '{}',
  'empty', '[-1e-30,1e30]', '(,)', '(,"2000-02-29 00:00:00+00"]', '(,)', '{}',
  '{}', '{}',
  '(,)', '{}',
  '(-0,1e300)', '{1,-1,0}', '[(1e-300,2),(3,4)]', '(0,0),(0,0)', '((0,0))', '((0,0))', '<(1,2),0>', '{}',
  '0044-03-15 12:00:00+00 BC', '0001-01-01 00:00:00 BC', '-178000000 years', '-Infinity', 'NaN', '\x', '5874897-12-31', '00:00:00-15:59',
  '{}', '{}'),
 (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
"#;
