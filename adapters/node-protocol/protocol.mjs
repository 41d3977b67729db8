// The child's side of kvcheck's engine protocol (docs/ENGINE_PROTOCOL.md) for
// adapters written in Node: length-prefixed frames on stdin/stdout, one reply
// per request in order, refusals as {"error": {kind, message}}. Shared by
// adapters/llama.cpp and adapters/onnxruntime so that the framing has one
// implementation; it needs no package.
import fs from "node:fs";

export const kMaxControlBytes = 1 << 20;

// The highest protocol version spoken. In 2 kvcheck names the ids and sends
// what cannot fail without waiting for the reply (docs/ENGINE_PROTOCOL.md,
// "Versioning"): fewer round trips, each a wake-up of both processes. The
// loop below needs nothing more for it: requests are read and answered in
// order whether or not kvcheck waited for the previous reply.
export const kProtocol = 2;

// The ids of models, engines and sequences: kvcheck's in version 2 (the
// request's `field`), the adapter's own counter in version 1.
export class Ids {
    constructor() {
        this.version = 1;  // the protocol version agreed at hello
        this.next = 0;     // the last id issued in version 1
    }

    // The version to answer `hello` with: 2 where kvcheck offers it, else 1.
    agree(hello) {
        this.version = Number.isInteger(hello?.protocol) && hello.protocol >= 2 ? kProtocol : 1;
        return this.version;
    }

    // The id of what `request` makes.
    of(request, field) {
        if (this.version < 2) return ++this.next;
        const id = request[field];
        if (!Number.isInteger(id)) throw new EngineError("input", `${request.op}: "${field}" ${JSON.stringify(id)} is not an integer id`);
        return id;
    }
}

// A refusal of docs/ENGINE_PROTOCOL.md's table ("capacity", "rows", ...):
// answered with its kind; any other exception is answered as "internal".
export class EngineError extends Error {
    constructor(kind, message) {
        super(message);
        this.kind = kind;
    }
}

// Length-prefixed frames from a stream; read(n) resolves to n bytes or null at end of input.
export class FrameReader {
    constructor(stream) {
        this.chunks = [];
        this.size = 0;
        this.ended = false;
        this.waiter = null;
        stream.on("data", (chunk) => {
            this.chunks.push(chunk);
            this.size += chunk.length;
            this.wake();
        });
        stream.on("end", () => {
            this.ended = true;
            this.wake();
        });
    }

    wake() {
        const waiter = this.waiter;
        this.waiter = null;
        if (waiter) waiter();
    }

    async read(n) {
        while (this.size < n) {
            if (this.ended) return null;
            await new Promise((resolve) => (this.waiter = resolve));
        }
        const all = Buffer.concat(this.chunks);
        this.chunks = [all.subarray(n)];
        this.size = all.length - n;
        return all.subarray(0, n);
    }

    async frame(limit) {
        const head = await this.read(4);
        if (head == null) return null;
        const n = head.readUInt32LE(0);
        if (n > limit) throw new Error(`a request frame of ${n} bytes (at most ${limit})`);
        return this.read(n);
    }
}

export function frame(bytes) {
    const head = Buffer.alloc(4);
    head.writeUInt32LE(bytes.length, 0);
    return [head, bytes];
}

// The request loop: `handle(request)` resolves to [reply, payloads]; a thrown
// EngineError becomes a refusal of its kind, anything else kind "internal"
// with the stack. `after(request, reply)` (optional) sees each pair, e.g. a
// diagnostic trace. Returns at end of input or "bye".
export async function serve(input, output, handle, after = () => {}) {
    const reader = new FrameReader(input);
    for (;;) {
        const body = await reader.frame(kMaxControlBytes);
        if (body == null) return;
        let request;
        try {
            request = JSON.parse(body.toString("utf8"));
        } catch (error) {
            throw new Error(`a request that is not JSON: ${error.message}`);
        }
        if (request?.op === "bye") return;
        let reply, payloads;
        try {
            [reply, payloads] = await handle(request);
        } catch (error) {
            const kind = error instanceof EngineError ? error.kind : "internal";
            reply = {error: {kind, message: error instanceof EngineError ? error.message : String(error?.stack ?? error)}};
            payloads = [];
        }
        after(request, reply);
        const parts = frame(Buffer.from(JSON.stringify(reply)));
        for (const payload of payloads) parts.push(...frame(payload));
        output.write(Buffer.concat(parts));
    }
}

// The refusals every engine owes a step before it runs anything
// (docs/ENGINE_PROTOCOL.md): no entries, a sequence twice, an empty chunk
// (bad_batch), a token outside [0, vocab) (bad_token); `sequenceOf(id)`
// throws unknown_sequence for a sequence that is not live. Capacity is the
// caller's: what a full sequence is differs between engines.
export function checkStepEntries(entries, sequenceOf, vocab) {
    if (!Array.isArray(entries) || entries.length === 0) throw new EngineError("bad_batch", "a step without entries");
    const seen = new Set();
    for (const entry of entries) {
        sequenceOf(entry.sequence);
        if (seen.has(entry.sequence)) throw new EngineError("bad_batch", `sequence ${entry.sequence} twice in one step`);
        seen.add(entry.sequence);
        if (!Array.isArray(entry.tokens) || entry.tokens.length === 0)
            throw new EngineError("bad_batch", `an empty chunk for sequence ${entry.sequence}`);
        for (const token of entry.tokens) {
            if (!Number.isInteger(token) || token < 0 || token >= vocab)
                throw new EngineError("bad_token", `token ${token} outside [0, ${vocab})`);
        }
    }
}

// kvcheck-export: `given` (an adapter's --export), else $KVCHECK_EXPORT,
// which kvcheck sets in its children's environment to the kvcheck-export
// beside itself (backends/exec/exec_child.h, child_environment). Never
// searched for: the newest of several builds was once a binary being
// relinked mid-run (issue 33). Returns {file}, or {problem} for the caller's
// usage message (exit 2).
export function findExport(given) {
    const file = given ?? process.env.KVCHECK_EXPORT;
    if (!file) return {problem: "no kvcheck-export named: run under kvcheck (which sets KVCHECK_EXPORT), or pass --export PATH"};
    if (!fs.existsSync(file)) return {problem: `kvcheck-export ${file} (${given ? "--export" : "$KVCHECK_EXPORT"}) does not exist`};
    return {file};
}
