// Lists the leaf paths where two JSON documents differ: node json-diff.mjs A.json B.json
// Each line: "- PATH VALUE" (only in A), "+ PATH VALUE" (only in B), "~ PATH A-VALUE -> B-VALUE".
// Array elements are matched by index, except arrays of objects with an `id` (or an `info.id`),
// which are matched by that id. Exits 1 when the documents differ.
import fs from "node:fs";

const [a, b] = process.argv.slice(2).map((f) => JSON.parse(fs.readFileSync(f, "utf8")));
const out = [];
const show = (v) => JSON.stringify(v)?.slice(0, 120);
const keyOf = (x) => (x && typeof x === "object" ? x.id ?? x.info?.id : undefined);

function walk(x, y, path) {
  if (JSON.stringify(x) === JSON.stringify(y)) return;
  if (Array.isArray(x) && Array.isArray(y)) {
    const keyed = [...x, ...y].every((e) => keyOf(e) !== undefined);
    if (keyed) {
      const mx = new Map(x.map((e) => [keyOf(e), e]));
      const my = new Map(y.map((e) => [keyOf(e), e]));
      const ox = x.map(keyOf).filter((k) => my.has(k));
      const oy = y.map(keyOf).filter((k) => mx.has(k));
      if (JSON.stringify(ox) !== JSON.stringify(oy)) out.push(`~ ${path} order differs`);
      for (const [k, v] of mx) my.has(k) ? walk(v, my.get(k), `${path}[${k}]`) : out.push(`- ${path}[${k}] ${show(v)}`);
      for (const [k, v] of my) if (!mx.has(k)) out.push(`+ ${path}[${k}] ${show(v)}`);
      return;
    }
    const n = Math.max(x.length, y.length);
    for (let i = 0; i < n; i++) {
      if (i >= y.length) out.push(`- ${path}[${i}] ${show(x[i])}`);
      else if (i >= x.length) out.push(`+ ${path}[${i}] ${show(y[i])}`);
      else walk(x[i], y[i], `${path}[${i}]`);
    }
    return;
  }
  const isObj = (v) => v && typeof v === "object" && !Array.isArray(v);
  if (isObj(x) && isObj(y)) {
    for (const k of Object.keys(x)) k in y ? walk(x[k], y[k], `${path}.${k}`) : out.push(`- ${path}.${k} ${show(x[k])}`);
    for (const k of Object.keys(y)) if (!(k in x)) out.push(`+ ${path}.${k} ${show(y[k])}`);
    return;
  }
  out.push(`~ ${path} ${show(x)} -> ${show(y)}`);
}

walk(a, b, "");
for (const line of out) console.log(line);
process.exit(out.length ? 1 : 0);
