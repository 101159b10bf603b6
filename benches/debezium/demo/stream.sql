-- Streamed changes; each statement outside BEGIN/COMMIT is its own transaction.
\echo step 1: inserts (full row, all-NULL row)
INSERT INTO public.typed VALUES
 (4, 4, 4, true, 4.5, 4.25, 4.5, 0.000001, 4.00,
  'vc four', 'x', 'text four', '\xdeadbeef'::bytea, '2000-02-29', '23:59:59.999999', '00:00:00+00',
  '2000-02-29 23:59:59.999999', '2000-02-29 23:59:59.999999-08', '00:00:00.000001',
  'ffffffff-ffff-ffff-ffff-ffffffffffff', '{"k": "v"}', '{"k": {"n": null}}',
  '<x a="1"/>', '{-1,NULL,3}', '{"q\"uote"}', 'a=>b', '10.0.0.0/8', 'ok',
  '2000-02-29 23:59:59.999', '23:59:59', B'111', '(3,4)', DEFAULT);
INSERT INTO public.typed (id) VALUES (5);
\echo step 2: update without key change (identity DEFAULT)
UPDATE public.typed SET t = 'text one updated', n = 1.5 WHERE id = 1;
\echo step 3: update with key change 2 -> 20 (identity DEFAULT)
UPDATE public.typed SET id = 20 WHERE id = 2;
\echo step 4: delete (identity DEFAULT)
DELETE FROM public.typed WHERE id = 3;
\echo step 5: FULL identity update / key change / delete
UPDATE public.full_t SET v = 'full one updated' WHERE id = 1;
UPDATE public.full_t SET id = 3 WHERE id = 2;
DELETE FROM public.full_t WHERE id = 1;
\echo step 6: TOAST
UPDATE public.toast_t SET other = 2 WHERE id = 1;
INSERT INTO public.toast_t VALUES (2, (SELECT string_agg(md5((g+1000)::text), '') FROM generate_series(1,400) g), 1);
UPDATE public.toast_t SET other = 3 WHERE id = 2;
UPDATE public.toast_t SET big = 'small now' WHERE id = 2;
DELETE FROM public.toast_t WHERE id = 1;
UPDATE public.toast_full SET other = 2 WHERE id = 1;
DELETE FROM public.toast_full WHERE id = 1;
\echo step 7: one multi-statement transaction
BEGIN;
INSERT INTO public.ck VALUES (1, 'b', 200), (2, 'a', 300);
UPDATE public.ck SET v = v + 1 WHERE k1 = 1;
UPDATE public.nokey SET b = 'nk one updated' WHERE a = 1;
INSERT INTO public.nokey VALUES (2, 'nk two');
DELETE FROM public.nokey WHERE a = 2;
COMMIT;
\echo step 8: TRUNCATE
TRUNCATE public.typed;
TRUNCATE public.ck, public.nokey;
\echo step 9: special values
INSERT INTO public.special_t VALUES
 (1, 'NaN', 'NaN', 'NaN', 'infinity', 'infinity', 'infinity'),
 (2, 12345678901234567890.123456789, -9999999.999, '-Infinity', '-infinity', '-infinity', '-infinity'),
 (3, -0.0, 0, -0.0, '0001-01-01', '0001-01-01 00:00:00', '0001-01-01 00:00:00+00'),
 (4, 1e-20, 0.001, 1e-300, '4713-01-01 BC', '294276-12-31 23:59:59.999999', '2262-04-11 23:47:16.854775807+00');
