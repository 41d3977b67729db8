// The engine protocol (docs/ENGINE_PROTOCOL.md, v1) spoken to engine.mjs by
// the adapter's Node tests, which check what no kvcheck property reaches
// (refusals kvcheck never sends, snapshots of shapes its generator never
// draws, how the child finds kvcheck-export). One client for all of them.
import assert from "node:assert/strict";
import {execFileSync, spawn} from "node:child_process";
import {mkdtempSync, writeFileSync} from "node:fs";
import {tmpdir} from "node:os";
import {join} from "node:path";

import {adapterDir} from "./requirements.mjs";

// A model folder (config.json + model.safetensors) as kvcheck's exec client
// writes one; config holds kvcheck's config.json fields.
export function modelFolder(exportTool, config, seed) {
    const folder = mkdtempSync(join(tmpdir(), "kvcheck-adapter-test-"));
    const configFile = join(folder, "config.json");
    writeFileSync(configFile, JSON.stringify(config));
    execFileSync(exportTool, ["--config", configFile, "--seed", String(seed), "--out", join(folder, "model.safetensors")]);
    return folder;
}

// One engine.mjs child with the given arguments and environment.
export class AdapterChild {
    constructor(args, env = process.env) {
        this.child = spawn(process.execPath, [join(adapterDir, "engine.mjs"), ...args],
                           {stdio: ["pipe", "pipe", "pipe"], env});
        this.stderr = "";
        this.child.stderr.on("data", (chunk) => (this.stderr += chunk));
        this.exit = new Promise((resolve) => this.child.on("exit", (code, signal) => resolve({code, signal})));
        this.buffered = Buffer.alloc(0);
        this.waiting = null;
        this.child.stdout.on("data", (chunk) => {
            this.buffered = Buffer.concat([this.buffered, chunk]);
            this.wake();
        });
        this.exit.then(() => this.wake());
        this.exited = false;
        this.exit.then(() => (this.exited = true));
    }

    wake() {
        const waiting = this.waiting;
        this.waiting = null;
        if (waiting) waiting();
    }

    async readFrame() {
        for (;;) {
            if (this.buffered.length >= 4 && this.buffered.length >= 4 + this.buffered.readUInt32LE(0)) {
                const n = this.buffered.readUInt32LE(0);
                const body = this.buffered.subarray(4, 4 + n);
                this.buffered = this.buffered.subarray(4 + n);
                return body;
            }
            if (this.exited) throw new Error(`engine.mjs exited: ${this.stderr}`);
            await new Promise((resolve) => (this.waiting = resolve));
        }
    }

    // Sends one request; resolves to [reply, payloads].
    async request(message) {
        const body = Buffer.from(JSON.stringify(message));
        const head = Buffer.alloc(4);
        head.writeUInt32LE(body.length, 0);
        this.child.stdin.write(Buffer.concat([head, body]));
        const reply = JSON.parse((await this.readFrame()).toString("utf8"));
        const payloads = [];
        for (let i = 0; i < (reply.payloads ?? []).length; ++i) payloads.push(await this.readFrame());
        return [reply, payloads];
    }

    async ok(message) {
        const [reply, payloads] = await this.request(message);
        assert.equal(reply.error, undefined, `${JSON.stringify(message)} was refused: ${JSON.stringify(reply.error)}`);
        return [reply, payloads];
    }

    async refused(message, kind) {
        const [reply] = await this.request(message);
        assert.equal(reply.error?.kind, kind, `${JSON.stringify(message)}: expected a ${kind} refusal, got ${JSON.stringify(reply)}`);
        console.log(`ok: ${message.op} ${JSON.stringify(message)} -> ${kind}`);
    }

    // The cache snapshot of one layer: {positions, k, v} with k, v [n][KVH*D] f32.
    async cache(engine, sequence, layer) {
        const [reply, [k, v]] = await this.ok({op: "cache", engine, sequence, layer});
        const floats = (bytes) => new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
        return {positions: reply.positions, k: floats(k), v: floats(v)};
    }

    async close() {
        this.child.stdin.end();
        return this.exit;
    }
}
