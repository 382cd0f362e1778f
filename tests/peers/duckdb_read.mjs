// Reads a Parquet file with DuckDB and prints what DuckDB sees, as one JSON
// object on stdout, for tests that check flywheel's Parquet writer against an
// independent reader (src/flywheel/interop/parquet/writer_test.cc).
//
//   node tests/peers/duckdb_read.mjs FILE [--metadata] [--where CONDITION]
//
// Output: {"duckdb_version", "schema": [{name, type}], "rows": [{...}],
//          "metadata": [...]} where rows are in the canonical form of
// testdata/parquet/README.md:
//   integers: numbers, outside ±(2^53-1) decimal strings; floats: the double
//   value (NaN/±Inf as "NaN", "Infinity", "-Infinity"); BLOB: base64;
//   DATE "YYYY-MM-DD"; TIMESTAMP (any unit, with or without time zone, in
//   UTC) "YYYY-MM-DDTHH:MM:SS[.fraction]" with trailing zeros dropped; TIME
//   "HH:MM:SS[.fraction]" likewise; DECIMAL: its decimal string; lists:
//   arrays; structs: objects; null: null.
// --where keeps the rows meeting a SQL condition (which DuckDB may answer
// from the file's statistics). --metadata adds DuckDB's parquet_metadata() rows (one per column chunk:
// row_group_id, path_in_schema, type, num_values, compression, encodings,
// stats_min, stats_max, stats_min_value, stats_max_value, stats_null_count).
//
// @duckdb/node-api is resolved from bench/peers/node_modules (bench/run_all.sh
// installs it), else from the usual module path. Exit status 2: DuckDB is not
// installed; 1: DuckDB failed to read the file.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

async function loadDuckDB() {
  const local = join(root, 'bench', 'peers', 'node_modules', '@duckdb', 'node-api', 'lib', 'index.js');
  if (existsSync(local)) return import(pathToFileURL(local).href);
  try {
    return await import('@duckdb/node-api');
  } catch (e) {
    console.error(`duckdb_read: @duckdb/node-api is not installed (looked in ${local}): ${e}`);
    process.exit(2);
  }
}

const MAX_SAFE = 9007199254740991n;

function pad(n, width) {
  return String(n).padStart(width, '0');
}

// Days since 1970-01-01 as a proleptic Gregorian date.
function civil(days) {
  let z = BigInt(days) + 719468n;
  const era = (z >= 0n ? z : z - 146096n) / 146097n;
  const doe = z - era * 146097n;
  const yoe = (doe - doe / 1460n + doe / 36524n - doe / 146096n) / 365n;
  const doy = doe - (365n * yoe + yoe / 4n - yoe / 100n);
  const mp = (5n * doy + 2n) / 153n;
  const d = doy - (153n * mp + 2n) / 5n + 1n;
  const m = mp < 10n ? mp + 3n : mp - 9n;
  const y = yoe + era * 400n + (m <= 2n ? 1n : 0n);
  const ys = y < 0n ? '-' + pad(-y, 4) : pad(y, 4);
  return `${ys}-${pad(m, 2)}-${pad(d, 2)}`;
}

function fraction(frac, digits) {
  if (frac === 0n) return '';
  return '.' + pad(frac, digits).replace(/0+$/, '');
}

// v units of 10^-digits seconds since midnight / the epoch.
function clock(sod, frac, digits) {
  return `${pad(sod / 3600n, 2)}:${pad((sod / 60n) % 60n, 2)}:${pad(sod % 60n, 2)}${fraction(frac, digits)}`;
}

function timestamp(v, digits) {
  const per = 10n ** BigInt(digits);
  let s = v / per;
  let frac = v % per;
  if (frac < 0n) {
    frac += per;
    s -= 1n;
  }
  let days = s / 86400n;
  let sod = s % 86400n;
  if (sod < 0n) {
    sod += 86400n;
    days -= 1n;
  }
  return `${civil(days)}T${clock(sod, frac, digits)}`;
}

function time(v, digits) {
  const per = 10n ** BigInt(digits);
  return clock(v / per, v % per, digits);
}

function decimal(value, scale) {
  const neg = value < 0n;
  let digits = (neg ? -value : value).toString();
  while (digits.length <= scale) digits = '0' + digits;
  if (scale > 0) digits = digits.slice(0, digits.length - scale) + '.' + digits.slice(digits.length - scale);
  return (neg ? '-' : '') + digits;
}

function makeCanon(d) {
  const canon = (v) => {
    if (v === null || v === undefined) return null;
    switch (typeof v) {
      case 'boolean':
      case 'string':
        return v;
      case 'number':
        if (Number.isNaN(v)) return 'NaN';
        if (v === Infinity) return 'Infinity';
        if (v === -Infinity) return '-Infinity';
        return v;
      case 'bigint':
        return v > MAX_SAFE || v < -MAX_SAFE ? v.toString() : Number(v);
      default:
        break;
    }
    if (v instanceof d.DuckDBBlobValue) return Buffer.from(v.bytes).toString('base64');
    if (v instanceof d.DuckDBDateValue) return civil(v.days);
    if (v instanceof d.DuckDBTimestampTZValue) return timestamp(v.micros, 6);
    if (v instanceof d.DuckDBTimestampValue) return timestamp(v.micros, 6);
    if (v instanceof d.DuckDBTimestampMillisecondsValue) return timestamp(v.millis, 3);
    if (v instanceof d.DuckDBTimestampNanosecondsValue) return timestamp(v.nanos, 9);
    if (v instanceof d.DuckDBTimestampSecondsValue) return timestamp(v.seconds, 0);
    if (v instanceof d.DuckDBTimeValue) return time(v.micros, 6);
    if (d.DuckDBTimeNSValue && v instanceof d.DuckDBTimeNSValue) return time(v.nanos, 9);
    if (v instanceof d.DuckDBDecimalValue) return decimal(v.value, v.scale);
    if (v instanceof d.DuckDBListValue || v instanceof d.DuckDBArrayValue) return v.items.map(canon);
    if (v instanceof d.DuckDBStructValue) {
      const o = {};
      for (const [k, x] of Object.entries(v.entries)) o[k] = canon(x);
      return o;
    }
    if (v instanceof d.DuckDBMapValue) return v.entries.map((e) => ({ key: canon(e.key), value: canon(e.value) }));
    return String(v);
  };
  return canon;
}

const sqlString = (s) => `'${s.replace(/'/g, "''")}'`;

async function main() {
  const args = process.argv.slice(2);
  const at = args.indexOf('--where');
  const where = at >= 0 ? args[at + 1] : '';
  const file = args.find((a, i) => !a.startsWith('--') && (at < 0 || i !== at + 1));
  if (!file || (at >= 0 && !where)) {
    console.error('usage: node duckdb_read.mjs FILE [--metadata] [--where CONDITION]');
    process.exit(64);
  }
  const d = await loadDuckDB();
  const canon = makeCanon(d);
  const instance = await d.DuckDBInstance.create(':memory:');
  const conn = await instance.connect();
  const src = `read_parquet(${sqlString(file)})`;
  const out = {};
  out.duckdb_version = String((await conn.runAndReadAll('SELECT version()')).getRows()[0][0]);
  const describe = await conn.runAndReadAll(`DESCRIBE SELECT * FROM ${src}`);
  out.schema = describe.getRowObjects().map((r) => ({ name: String(r.column_name), type: String(r.column_type) }));
  const rows = await conn.runAndReadAll(`SELECT * FROM ${src}${where ? ` WHERE ${where}` : ''}`);
  out.rows = rows.getRowObjects().map((r) => {
    const o = {};
    for (const [k, v] of Object.entries(r)) o[k] = canon(v);
    return o;
  });
  if (args.includes('--metadata')) {
    const m = await conn.runAndReadAll(
      'SELECT row_group_id, path_in_schema, type, num_values, compression, encodings, stats_min, stats_max, ' +
      `stats_min_value, stats_max_value, stats_null_count FROM parquet_metadata(${sqlString(file)}) ` +
      'ORDER BY row_group_id, column_id');
    out.metadata = m.getRowObjects().map((r) => {
      const o = {};
      for (const [k, v] of Object.entries(r)) o[k] = canon(v);
      return o;
    });
  }
  conn.closeSync();
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => {
  console.error(`duckdb_read: ${e.stack || e}`);
  process.exit(1);
});
