// Regenerates package-lock.json so that `npm ci` accepts it.
//
//   cd adapters/llama.cpp && node relock.mjs
//
// node-llama-cpp lists one prebuilt binary package per platform as an optional
// dependency. The registry these machines reach serves no 3.22.x version of
// some of them (mac, win, linux-riscv64), so `npm install` leaves them out of
// the lock, and `npm ci` then refuses the lock as out of sync with package.json.
// For each optional dependency that is missing, this adds an entry holding only
// its version and "optional": true. Nothing fetches them: ci/setup installs with
// --omit=optional, and linux-x64, the one binary needed, is a direct dependency.
import {execFileSync} from "node:child_process";
import {readFileSync, writeFileSync} from "node:fs";

execFileSync("npm", ["install", "--package-lock-only", "--ignore-scripts"], {stdio: "inherit"});
const lock = JSON.parse(readFileSync("package-lock.json", "utf8"));
const packages = lock.packages;
const wanted = packages["node_modules/node-llama-cpp"].optionalDependencies ?? {};
for (const [name, version] of Object.entries(wanted)) {
    const key = `node_modules/${name}`;
    if (packages[key] !== undefined) continue;
    packages[key] = {version, optional: true};
    console.log(`relock: ${name}@${version} is not served; added as a placeholder`);
}
lock.packages = Object.fromEntries(Object.entries(packages).sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0));
writeFileSync("package-lock.json", JSON.stringify(lock, null, 2) + "\n");
