// DuckDB peer for bench/table_bench.cc "take": random row access into a
// Parquet file that DuckDB writes itself.
//
//   node duckdb_take.mjs --rows N --indices FILE --dir DIR [--seconds 20] [--batch 256]
//
// FILE is a CSV "pos,idx" (header line) of the shuffled row indices that
// table_bench also takes. The data follows table_bench's formula:
//   id = i (BIGINT), emb[k] = i + k/16 (FLOAT, 16 per row), i in [0, N).
// Measured (all in this process, after one untimed warm-up query each):
//   write      COPY ... TO DIR/take.parquet (FORMAT parquet), DuckDB defaults.
//   loader     batches of `batch` indices per query, a prepared
//              `... WHERE file_row_number IN ($1..$batch)`; as many batches as
//              fit in `seconds`, split into 3 windows; best window reported.
//   bulk       one query joining all N (pos, idx) pairs on file_row_number,
//              ordered by pos, materialised into a temp table; best of 3.
// Prints one JSON object on the last line of stdout.
import { DuckDBInstance } from '@duckdb/node-api';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

function parseArgs(argv) {
  const args = { rows: 1000000, indices: '', dir: '', seconds: 20, batch: 256, repeats: 3 };
  for (let i = 2; i < argv.length; i++) {
    const [k, v] = argv[i].replace(/^--/, '').split('=');
    const val = v !== undefined ? v : argv[++i];
    args[k] = ['indices', 'dir'].includes(k) ? val : Number(val);
  }
  if (!args.indices || !args.dir) throw new Error('--indices and --dir are required');
  return args;
}

const now = () => Number(process.hrtime.bigint()) / 1e9;
const sqlString = (s) => `'${s.replace(/'/g, "''")}'`;

async function main() {
  const args = parseArgs(process.argv);
  const n = args.rows;
  const parquet = join(args.dir, 'take.parquet');
  const lines = readFileSync(args.indices, 'utf8').split('\n');
  const indices = [];
  for (let i = 1; i < lines.length; i++) {
    if (!lines[i]) continue;
    const comma = lines[i].indexOf(',');
    indices.push(Number(lines[i].slice(comma + 1)));
  }
  if (indices.length !== n) throw new Error(`expected ${n} indices, read ${indices.length}`);

  const instance = await DuckDBInstance.create(':memory:');
  const conn = await instance.connect();
  const setting = async (name) => {
    const r = await conn.runAndReadAll(`SELECT current_setting('${name}')`);
    return String(r.getRows()[0][0]);
  };
  let metadataCache = 'unavailable';
  try {
    // Keeps the Parquet footer cached between queries: the fastest DuckDB config.
    await conn.run('SET parquet_metadata_cache = true');
    metadataCache = await setting('parquet_metadata_cache');
  } catch (e) { /* older DuckDB */ }
  const version = String((await conn.runAndReadAll('SELECT version()')).getRows()[0][0]);
  const threads = await setting('threads');

  // ---- write the Parquet file
  const emb = Array.from({ length: 16 }, (_, k) => `(i + ${k} * 0.0625)::FLOAT`).join(', ');
  let t0 = now();
  await conn.run(`COPY (SELECT i::BIGINT AS id, [${emb}] AS emb FROM range(${n}) t(i)) ` +
                 `TO ${sqlString(parquet)} (FORMAT parquet)`);
  const writeSeconds = now() - t0;
  const src = `read_parquet(${sqlString(parquet)}, file_row_number = true)`;
  const check = (await conn.runAndReadAll(
    `SELECT count(*), sum(id), sum(emb[16]) FROM read_parquet(${sqlString(parquet)})`)).getRows()[0];
  if (Number(check[0]) !== n) throw new Error(`parquet has ${check[0]} rows`);
  const rowGroups = Number((await conn.runAndReadAll(
    `SELECT count(DISTINCT row_group_id) FROM parquet_metadata(${sqlString(parquet)})`)).getRows()[0][0]);
  const fileBytes = Number((await conn.runAndReadAll(
    `SELECT size FROM read_blob(${sqlString(parquet)})`)).getRows()[0][0]);

  // ---- loader pattern: one query per batch of indices
  const b = args.batch;
  const placeholders = Array.from({ length: b }, (_, k) => `$${k + 1}`).join(', ');
  const stmt = await conn.prepare(
    `SELECT id, emb FROM ${src} WHERE file_row_number IN (${placeholders})`);
  const nbatches = Math.floor(n / b);
  const runBatch = async (bi) => {
    const base = (bi % nbatches) * b;
    for (let k = 0; k < b; k++) stmt.bindBigInt(k + 1, BigInt(indices[base + k]));
    const reader = await stmt.runAndReadAll();
    if (reader.currentRowCount !== b) throw new Error(`batch ${bi}: ${reader.currentRowCount} rows`);
    return reader;
  };
  {  // warm-up + correctness of one batch (untimed)
    const reader = await runBatch(0);
    const got = reader.getColumns()[0].map(Number).sort((x, y) => x - y);
    const want = indices.slice(0, b).sort((x, y) => x - y);
    if (got.some((v, k) => v !== want[k])) throw new Error('loader batch returned the wrong rows');
  }
  const windows = [];
  let bi = 1;
  const windowSeconds = args.seconds / args.repeats;
  for (let w = 0; w < args.repeats; w++) {
    const start = now();
    let rows = 0;
    while (now() - start < windowSeconds) {
      await runBatch(bi++);
      rows += b;
    }
    const el = now() - start;
    windows.push({ rows, seconds: el, rows_per_s: rows / el });
  }
  const loaderBest = Math.max(...windows.map((w) => w.rows_per_s));

  // ---- bulk: one join of all (pos, idx)
  await conn.run(`CREATE TABLE idx AS SELECT * FROM read_csv(${sqlString(args.indices)}, header = true, ` +
                 `columns = {'pos': 'BIGINT', 'idx': 'BIGINT'})`);
  const bulkSql = `CREATE OR REPLACE TEMP TABLE r AS SELECT p.pos, t.id, t.emb FROM idx p ` +
                  `JOIN ${src} t ON t.file_row_number = p.idx ORDER BY p.pos`;
  await conn.run(bulkSql);  // warm-up
  const bulk = [];
  for (let r = 0; r < args.repeats; r++) {
    t0 = now();
    await conn.run(bulkSql);
    const el = now() - t0;
    bulk.push({ seconds: el, rows_per_s: n / el });
  }
  const verify = (await conn.runAndReadAll(
    `SELECT count(*), count(*) FILTER (WHERE r.id = i.idx AND r.emb[3] = (i.idx + 0.125)::FLOAT) ` +
    `FROM r JOIN idx i USING (pos)`)).getRows()[0];
  if (Number(verify[0]) !== n || Number(verify[1]) !== n) {
    throw new Error(`bulk join returned wrong rows: ${verify}`);
  }
  const bulkBest = Math.max(...bulk.map((x) => x.rows_per_s));

  const out = {
    duckdb_version: version,
    threads: Number(threads),
    parquet_metadata_cache: metadataCache,
    rows: n,
    parquet_bytes: fileBytes,
    parquet_row_groups: rowGroups,
    parquet_write_s: writeSeconds,
    batch: b,
    loader_windows: windows,
    loader_rows_per_s: loaderBest,
    loader_ms_per_batch: 1000 * b / loaderBest,
    bulk_runs: bulk,
    bulk_rows_per_s: bulkBest,
  };
  conn.closeSync();
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(`duckdb_take: ${e.stack || e}`);
  process.exit(1);
});
