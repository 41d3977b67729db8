// kvcheck-export, run for the adapter from one long-lived /bin/sh. Forking
// node itself for each model cost 26 ms a conversion where the tool takes 7
// (node's fork copies its page tables: `perf` put the fork among the
// adapter's largest kernel costs); the shell forks cheaply. One conversion at
// a time: the adapter handles one request after the other.
import {spawn} from "node:child_process";
import fs from "node:fs";
import path from "node:path";

// A word for sh, whatever it holds.
const quote = (text) => `'${text.replaceAll("'", "'\\''")}'`;

export class Exporter {
    constructor(tool, scratch) {
        this.tool = tool;                                 // kvcheck-export
        this.errors = path.join(scratch, "export.err");  // the last conversion's stderr
        this.shell = null;                                // started at the first conversion
        this.pending = null;                              // {resolve, reject} of the running conversion
        this.output = "";                                 // the shell's stdout not yet read
    }

    start() {
        const shell = spawn("/bin/sh", [], {stdio: ["pipe", "pipe", "ignore"]});
        shell.stdout.setEncoding("utf8");
        shell.stdout.on("data", (text) => {
            this.output += text;
            const end = this.output.indexOf("\n");
            if (end < 0 || this.pending == null) return;
            const status = Number(this.output.slice(0, end));
            this.output = this.output.slice(end + 1);
            const pending = this.pending;
            this.pending = null;
            pending.resolve(status);
        });
        shell.on("exit", (code, signal) => {
            if (this.shell === shell) this.shell = null;
            const pending = this.pending;
            this.pending = null;
            pending?.reject(new Error(`the shell running kvcheck-export ended (${signal ?? `exit ${code}`})`));
        });
        this.shell = shell;
    }

    // Writes `out`, the GGUF of the safetensors `source`; throws with the
    // tool's stderr if it fails.
    async convert(source, out) {
        if (this.shell == null) this.start();
        const status = await new Promise((resolve, reject) => {
            this.pending = {resolve, reject};
            this.shell.stdin.write(`${quote(this.tool)} --from ${quote(source)} --out ${quote(out)} >/dev/null ` +
                                   `2>${quote(this.errors)}; echo $?\n`);
        });
        if (status !== 0)
            throw new Error(`kvcheck-export --from ${source} failed (exit ${status}): ${fs.readFileSync(this.errors, "utf8")}`);
    }
}
