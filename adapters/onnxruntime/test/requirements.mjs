// What the Node tests of the ONNX Runtime adapter need before they can run:
// Node 20 and the pinned onnxruntime-node in node_modules. Without them a
// test is skipped (exit 77, ctest's SKIP_RETURN_CODE), not failed.
import {existsSync} from "node:fs";
import {dirname, join} from "node:path";
import {fileURLToPath} from "node:url";

export const adapterDir = dirname(dirname(fileURLToPath(import.meta.url)));

export function skipUnlessPackage() {
    if (Number(process.versions.node.split(".")[0]) < 20) {
        console.log(`SKIPPED: node ${process.versions.node} is older than 20, which the adapter needs`);
        process.exit(77);
    }
    if (!existsSync(join(adapterDir, "node_modules", "onnxruntime-node", "package.json"))) {
        console.log(`SKIPPED: ${join(adapterDir, "node_modules")} lacks onnxruntime-node: run ci/setup`);
        process.exit(77);
    }
}
