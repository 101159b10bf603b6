// The Node reference consumer of the e2e drain benchmark (`--consumers node`):
// pg-logical-replication 2.5 with its pgoutput plugin (protocol 1, text tuples, every
// message fully decoded into JavaScript objects), acknowledging automatically, until the
// stream passes --end. Prints `changes=N` (inserts + updates + deletes) on stdout, as
// the benchmark's other consumers do, so the harness checks the count.
//
// node drain.mjs --host H --port P --user U --database D --slot S --end X/Y
import { LogicalReplicationService, PgoutputPlugin } from 'pg-logical-replication';

const args = {};
for (let i = 2; i + 1 < process.argv.length; i += 2) {
  args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
}
for (const required of ['host', 'port', 'slot', 'end']) {
  if (!args[required]) {
    console.error(`drain.mjs: --${required} is required`);
    process.exit(2);
  }
}

/** An LSN `X/Y` as a BigInt, for comparison. */
function lsn(text) {
  const [hi, lo] = String(text).split('/');
  return (BigInt('0x' + hi) << 32n) | BigInt('0x' + lo);
}

const end = lsn(args.end);
let changes = 0;
let done = false;
const service = new LogicalReplicationService(
  {
    host: args.host,
    port: Number(args.port),
    user: args.user ?? 'postgres',
    database: args.database ?? 'postgres',
  },
  { acknowledge: { auto: true, timeoutSeconds: 10 } },
);
const plugin = new PgoutputPlugin({ protoVersion: 1, publicationNames: [args.publication ?? 'pub'] });

async function finish() {
  if (done) return;
  done = true;
  await service.stop();
  process.stdout.write(`changes=${changes}\n`);
  process.exit(0);
}

service.on('data', (position, message) => {
  switch (message.tag) {
    case 'insert':
    case 'update':
    case 'delete':
      changes += 1;
      break;
    case 'commit':
      if (message.commitEndLsn && lsn(message.commitEndLsn) >= end) finish();
      break;
    default:
      break;
  }
});
service.on('heartbeat', (position) => {
  if (lsn(position) >= end) finish();
});
service.on('error', (err) => {
  if (done) return;
  console.error(`drain.mjs: ${err.message ?? err}`);
  process.exit(1);
});
service.subscribe(plugin, args.slot).catch((err) => {
  if (done) return;
  console.error(`drain.mjs: ${err.message ?? err}`);
  process.exit(1);
});
