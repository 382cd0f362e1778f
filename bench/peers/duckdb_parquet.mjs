// DuckDB peer for bench/parquet_bench.cc: writes the benchmark's Parquet
// files and JSON lines, and measures DuckDB's own decode of them.
//
//   node duckdb_parquet.mjs make --rows N --out FILE --codec snappy|zstd
//       id BIGINT = i, x INTEGER = (i * 7919) % 1000003, f DOUBLE = i / 7,
//       g FLOAT = i % 1000 / 8, s VARCHAR = 'row-' || i || repeat('x', i % 17),
//       cat VARCHAR = 'c' || (i % 100) (dictionary-friendly),
//       toks INTEGER[] = range(i % 9) + i; every 13th s is NULL.
//       DuckDB's default row groups (122880 rows) and page layout.
//   node duckdb_parquet.mjs jsonl --in FILE --out OUT.jsonl
//       COPY (SELECT * FROM FILE) TO OUT (FORMAT json): one object per line.
//   node duckdb_parquet.mjs read --in FILE --threads T [--repeats 3]
//       SET threads = T; CREATE OR REPLACE TEMP TABLE t AS SELECT * FROM
//       read_parquet(FILE): every column of every row decoded into DuckDB's
//       own columnar storage (nothing converted to JavaScript). Best of
//       `repeats` after one untimed warm-up.
// Prints one JSON object on the last line of stdout.
import { DuckDBInstance } from '@duckdb/node-api';

function parseArgs(argv) {
  const args = { cmd: argv[2], rows: 1000000, repeats: 3, threads: 1, codec: 'snappy' };
  for (let i = 3; i < argv.length; i++) {
    const [k, v] = argv[i].replace(/^--/, '').split('=');
    const val = v !== undefined ? v : argv[++i];
    args[k] = ['rows', 'repeats', 'threads'].includes(k) ? Number(val) : val;
  }
  return args;
}

const now = () => Number(process.hrtime.bigint()) / 1e9;
const q = (s) => `'${String(s).replace(/'/g, "''")}'`;

async function main() {
  const a = parseArgs(process.argv);
  const instance = await DuckDBInstance.create(':memory:');
  const conn = await instance.connect();
  const version = String((await conn.runAndReadAll('SELECT version()')).getRows()[0][0]);
  if (a.cmd === 'make') {
    await conn.run(`COPY (SELECT i::BIGINT AS id, ((i * 7919) % 1000003)::INTEGER AS x, i / 7.0 AS f,
        ((i % 1000) / 8.0)::FLOAT AS g,
        CASE WHEN i % 13 = 0 THEN NULL ELSE 'row-' || i || repeat('x', (i % 17)::INTEGER) END AS s,
        'c' || (i % 100) AS cat,
        list_transform(range((i % 9)::BIGINT), k -> (k + i)::INTEGER) AS toks
      FROM range(${a.rows}) t(i)) TO ${q(a.out)} (FORMAT parquet, COMPRESSION ${a.codec})`);
    console.log(JSON.stringify({ duckdb: version, file: a.out, rows: a.rows, codec: a.codec }));
    return;
  }
  if (a.cmd === 'jsonl') {
    await conn.run(`COPY (SELECT * FROM read_parquet(${q(a.in)})) TO ${q(a.out)} (FORMAT json)`);
    console.log(JSON.stringify({ duckdb: version, file: a.out }));
    return;
  }
  if (a.cmd === 'read') {
    await conn.run(`SET threads = ${a.threads}`);
    const run = async () => {
      const t0 = now();
      await conn.run(`CREATE OR REPLACE TEMP TABLE t AS SELECT * FROM read_parquet(${q(a.in)})`);
      return now() - t0;
    };
    await run();
    let best = Infinity;
    for (let r = 0; r < a.repeats; r++) best = Math.min(best, await run());
    const rows = Number((await conn.runAndReadAll('SELECT count(*) FROM t')).getRows()[0][0]);
    console.log(JSON.stringify({ duckdb: version, threads: a.threads, rows, seconds: best }));
    return;
  }
  throw new Error(`unknown command ${a.cmd} (make, jsonl, read)`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
