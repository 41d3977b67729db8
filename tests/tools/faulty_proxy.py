"""Relays the engine protocol to a real engine and misbehaves on purpose at
the Nth step request, to test how kvcheck reports a faulty child.

    python3 faulty_proxy.py --fault FAULT --at N -- COMMAND ARGS...

exit, signal (SIGTERM), segv, abort, hang, garbage, bad_json, short_payload: the proxy misbehaves
instead of relaying that step and then stops answering. wrong_shape (the
logits payload loses its last value, control frame and payload frame agreeing)
and omit_reply (the step's reply is dropped) relay the rest as usual: an
adapter that breaks the protocol once, for `kvcheck check-adapter`.
refuse_start refuses the first start with kind rows (not relayed): a refusal
of a request kvcheck sent without waiting (protocol 2); refuse_finish does
the same to the first finish, with kind unknown_sequence. unsupported_fork
answers every fork with kind unsupported (not relayed) while the traits still
declare fork: a child that contradicts its traits. drop_positions removes the
"positions" of every cache reply, wrong_positions adds 1 to each listed
position (both relayed otherwise): a child that reports a ring's or a
shifted cache's slots wrongly, whose K/V are right. refuse_step answers the
Nth step with kind capacity (not relayed): a refusal of a step kvcheck may
have sent without waiting. refuse_load answers the Nth load (--at counts
loads here; kvcheck's resolve probe sends the first) with kind internal and
the message "faulty_proxy cannot read PATH" (not relayed): an engine that
fails to load a model. mha_loads_only refuses (kind internal) every load of a
model whose n_kv_heads differs from n_heads: an engine written without GQA;
--declare-mha-only adds limits.mha_only to the traits it relays, the
declaration such an engine owes.

--once FILE: misbehave only if FILE does not exist yet (and create it), so that
of all the children a campaign starts only the first fails.

--log FILE: append each request's op to FILE, one per line, as it arrives
(with --fault none, the proxy only relays and logs): when kvcheck sent what.
"""

import argparse
import json
import os
import signal
import struct
import subprocess
import sys
import time


def read_exact(stream, n):
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            sys.exit(0)
        data += chunk
    return data


def read_frame(stream):
    (n,) = struct.unpack("<I", read_exact(stream, 4))
    return read_exact(stream, n)


def frame(data):
    return struct.pack("<I", len(data)) + data


def misbehave(fault, out):
    sys.stderr.write("faulty_proxy: %s now\n" % fault)
    sys.stderr.flush()
    if fault == "exit":
        os._exit(3)
    if fault == "signal":
        os.kill(os.getpid(), signal.SIGTERM)
    if fault == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if fault == "abort":
        os.abort()
    if fault == "hang":
        time.sleep(3600)
    if fault == "garbage":
        out.write(b"\xff\xff\xff\x7f garbage")
    if fault == "bad_json":
        out.write(frame(b"{not json"))
    if fault == "short_payload":
        out.write(frame(b'{"payloads":[4]}') + frame(b"\0\0\0\0"))
    out.flush()
    time.sleep(3600)  # kvcheck must give up on us


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fault", required=True,
                        choices=["exit", "signal", "segv", "abort", "hang", "garbage", "bad_json", "short_payload",
                                 "wrong_shape", "omit_reply", "refuse_start",
                                 "unsupported_fork", "drop_positions", "wrong_positions",
                                 "refuse_step", "refuse_finish", "refuse_load", "mha_loads_only",
                                 "none"])
    parser.add_argument("--at", type=int, default=1, help="misbehave on this step request (refuse_load: this load)")
    parser.add_argument("--once", help="misbehave only if this file does not exist; create it")
    parser.add_argument("--log", help="append each request's op to this file")
    parser.add_argument("--declare-mha-only", action="store_true",
                        help="add limits.mha_only to the traits the engine declares")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    inner = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    steps = loads = 0
    refused = False
    while True:
        request = read_frame(inp)
        now = False
        op = json.loads(request).get("op")
        if args.log:
            with open(args.log, "a") as log:
                log.write("%s\n" % op)
        if op == "start" and args.fault == "refuse_start" and not refused:
            refused = True
            out.write(frame(b'{"error":{"kind":"rows","message":"faulty_proxy refuses"}}'))
            out.flush()
            continue
        if op == "finish" and args.fault == "refuse_finish" and not refused:
            refused = True
            out.write(frame(b'{"error":{"kind":"unknown_sequence","message":"faulty_proxy refuses"}}'))
            out.flush()
            continue
        if op == "load" and args.fault == "refuse_load":
            loads += 1
            if loads == args.at:
                message = "faulty_proxy cannot read %s" % json.loads(request).get("path")
                out.write(frame(json.dumps({"error": {"kind": "internal",
                                                      "message": message}}).encode()))
                out.flush()
                continue
        if op == "load" and args.fault == "mha_loads_only":
            with open(os.path.join(json.loads(request)["path"], "config.json")) as f:
                config = json.load(f)
            if config["n_kv_heads"] != config["n_heads"]:
                message = "faulty_proxy: n_kv_heads %d != n_heads %d (MHA only)" % (
                    config["n_kv_heads"], config["n_heads"])
                out.write(frame(json.dumps({"error": {"kind": "internal",
                                                      "message": message}}).encode()))
                out.flush()
                continue
        if op == "fork" and args.fault == "unsupported_fork":
            out.write(frame(b'{"error":{"kind":"unsupported","message":"faulty_proxy: no fork"}}'))
            out.flush()
            continue
        if op == "step":
            steps += 1
            now = steps == args.at
            if now and args.once:
                if os.path.exists(args.once):
                    now = False
                else:
                    open(args.once, "w").close()
            if now and args.fault == "refuse_step":
                out.write(frame(b'{"error":{"kind":"capacity","message":"faulty_proxy refuses"}}'))
                out.flush()
                continue
            if now and args.fault not in ("none", "wrong_shape", "omit_reply", "refuse_start",
                                          "refuse_finish", "refuse_load", "mha_loads_only",
                                          "unsupported_fork", "drop_positions",
                                          "wrong_positions"):
                misbehave(args.fault, out)
        inner.stdin.write(frame(request))
        inner.stdin.flush()
        control = read_frame(inner.stdout)
        payloads = [read_frame(inner.stdout) for _ in json.loads(control).get("payloads", [])]
        if op == "hello" and args.declare_mha_only:
            reply = json.loads(control)
            reply["traits"].setdefault("limits", {})["mha_only"] = True
            control = json.dumps(reply).encode()
        if op == "cache" and "positions" in json.loads(control):
            reply = json.loads(control)
            if args.fault == "drop_positions":
                del reply["positions"]
            elif args.fault == "wrong_positions":
                reply["positions"] = [p + 1 for p in reply["positions"]]
            control = json.dumps(reply).encode()
        if now and args.fault == "omit_reply":
            continue
        if now and args.fault == "wrong_shape" and payloads:
            payloads[0] = payloads[0][:-4]
            control = json.dumps({"payloads": [len(p) for p in payloads]}).encode()
        out.write(frame(control) + b"".join(frame(p) for p in payloads))
        out.flush()


if __name__ == "__main__":
    main()
