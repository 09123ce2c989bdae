#!/usr/bin/env python3
"""photon serve scaled out, end to end on loopback: a Redis server, three `photon serve --store
redis://...` replicas and HAProxy with deploy/haproxy.cfg, all started here on free ports and
stopped at the end, also when a check fails.

usage: test_scale.py --photon BIN --source-dir DIR --work-dir DIR

Twenty conversations of six greedy turns on the shipped model, each turn on another replica than
the one before (turns 0, 2, 4 through HAProxy, which names the replica in X-Served-By; turns 1, 3, 5
sent to a replica's port directly), while
  - one replica is killed with SIGKILL during turn 1 (the streams it cut are retried on the
    others),
  - Redis is stopped before turn 3 and started again, empty, before turn 4.
Every turn must succeed, and every conversation's tokens must equal the same conversation run
with `photon generate`: one long session (--save-session, --resume) where the server continued
the stored state, a fresh session over the whole prompt where it read the prompt whole (Redis
down, or a record lost). Turns 3 and 4 must have been read whole (store errors counted), the
others continued. Then two replicas race on one conversation (one saves, the other's save is
refused and counted), and a damaged record, a record holding a damaged state and a foreign value
in Redis are each refused, counted and read whole. Standard library only; every wait is bounded.
"""

import argparse
import concurrent.futures
import http.client
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

SOURCE = ""
WORK = ""
serve = None  # tests/serve/test_serve.py: Server, check, generate, the shipped model's path

CONVERSATIONS = 20
TURNS = 6
NEW_TOKENS = 4      # prompt tokens each turn adds
MAX_TOKENS = 8      # tokens each turn generates
KILL_TURN_TOKENS = 24  # turn 1 generates longer, so that the kill cuts streams
TRIES = 6
KEY_PREFIX = "photon:conversation:"


def check(condition, message):
    return serve.check(condition, message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, seconds, what):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise RuntimeError("timed out after %d s waiting for %s" % (seconds, what))


# ---------------------------------------------------------------------------------------------
# Redis and HAProxy


class Redis:
    """redis-server on a loopback port, in memory only, and a minimal RESP client."""

    def __init__(self, port):
        self.port, self.proc = port, None

    def start(self):
        self.log = open(os.path.join(WORK, "redis.log"), "a")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", WORK],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        wait_for(lambda: self._ping(), 20, "redis-server to answer")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)
        self.proc = None

    def _ping(self):
        try:
            return self.command("PING") == "PONG"
        except OSError:
            return False

    def command(self, *args):
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            out = b"*%d\r\n" % len(args)
            for a in args:
                a = a if isinstance(a, bytes) else str(a).encode()
                out += b"$%d\r\n%s\r\n" % (len(a), a)
            s.sendall(out)
            return self._reply(s.makefile("rb"))

    def _reply(self, f):
        line = f.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else f.read(n + 2)[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply(f) for _ in range(n)]
        raise RuntimeError("unexpected Redis reply %r" % line)


def haproxy_config(port, replicas):
    """deploy/haproxy.cfg with loopback bind and server lines, as deploy/run-local writes it."""
    with open(os.path.join(SOURCE, "deploy", "haproxy.cfg")) as f:
        lines = f.read().split("\n")
    out, servers_done = [], False
    for line in lines:
        if line.startswith("    bind "):
            line = "    bind 127.0.0.1:%d" % port
        elif line.startswith("    server "):
            if servers_done:
                continue
            servers_done = True
            line = "\n".join("    server photon-%d 127.0.0.1:%d" % (i + 1, r.port)
                             for i, r in enumerate(replicas))
        out.append(line)
    check(servers_done, "deploy/haproxy.cfg lists servers")
    path = os.path.join(WORK, "haproxy.cfg")
    with open(path, "w") as f:
        f.write("\n".join(out))
    return path


class HAProxy:
    def __init__(self, replicas):
        self.port = free_port()
        config = haproxy_config(self.port, replicas)
        self.log = open(os.path.join(WORK, "haproxy.log"), "w")
        self.proc = subprocess.Popen(["haproxy", "-f", config, "-db"], stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=self.log)
        wait_for(lambda: self.health() == 200, 30, "HAProxy to pass /health")

    def health(self):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            conn.request("GET", "/health")
            return conn.getresponse().status
        except OSError:
            return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)


# ---------------------------------------------------------------------------------------------
# One turn


class Cut(Exception):
    """The turn did not complete (connection refused or reset, a stream cut short, a 5xx)."""


def stream_turn(port, conversation, prompt, max_tokens, on_token=None):
    """A streamed, greedy completion of token ids -> (tokens, cached tokens, X-Served-By)."""
    body = dict(model=serve.KJV, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True,
                return_token_ids=True, stream_options={"include_usage": True})
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/v1/completions", body=json.dumps(body).encode(),
                     headers={"X-Conversation-Id": conversation,
                              "Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status >= 500:
            raise Cut("HTTP %d" % resp.status)
        if resp.status != 200:
            raise RuntimeError("turn of %s -> %d %s" % (conversation, resp.status, resp.read()))
        served_by = resp.getheader("X-Served-By")
        tokens, usage, done = [], None, False
        for raw in iter(resp.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            event = json.loads(line[6:])
            if "error" in event:
                raise Cut("stream error %s" % event["error"])
            if event.get("usage"):
                usage = event["usage"]
            for choice in event["choices"]:
                tokens += choice.get("token_ids", [])
                if on_token and choice.get("token_ids"):
                    on_token()
        if not done or usage is None:
            raise Cut("the stream ended without [DONE]")
        return tokens, usage["prompt_tokens_details"]["cached_tokens"], served_by
    except (OSError, http.client.HTTPException, ValueError) as error:
        raise Cut(repr(error))
    finally:
        conn.close()


class Cluster:
    def __init__(self):
        self.redis = Redis(free_port())
        self.replicas, self.haproxy = [], None
        self.alive = []

    def start(self):
        self.redis.start()
        url = "redis://127.0.0.1:%d/0?ttl=600&timeout=0.5" % self.redis.port
        # Without the prefix cache, cached_tokens counts only what a conversation's state continued.
        for _ in range(3):
            self.replicas.append(serve.Server(serve.KJV, "--store", url, "--threads", 1,
                                              "--max-running", 16, "--quiet",
                                              "--prefix-cache-mib", 0))
        self.alive = list(range(3))
        self.haproxy = HAProxy(self.replicas)

    def stop(self):
        if self.haproxy:
            self.haproxy.stop()
        for i, r in enumerate(self.replicas):
            if i in self.alive:
                r.stop()
            elif r.proc.poll() is None:
                r.kill()
        self.redis.stop()

    def kill(self, index):
        self.alive.remove(index)
        self.replicas[index].proc.send_signal(signal.SIGKILL)
        self.replicas[index].proc.wait(timeout=30)

    def metric(self, name):
        return sum(self.replicas[i].metrics().get(name, 0) for i in self.alive)

    def balanced_replica(self, conversation):
        """The replica HAProxy sends the conversation to now (GET /health with its header)."""
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.haproxy.port, timeout=10)
            conn.request("GET", "/health", headers={"X-Conversation-Id": conversation})
            resp = conn.getresponse()
            resp.read()
            return self.index_of(resp.getheader("X-Served-By"))
        except OSError:
            return None

    def index_of(self, served_by):
        match = re.fullmatch(r"photon-(\d)", served_by or "")
        return int(match.group(1)) - 1 if match else None


# ---------------------------------------------------------------------------------------------
# The conversations


class Conversation:
    def __init__(self, number):
        self.id = "conv-%02d" % number
        self.number = number
        self.history = []  # prompt and generated tokens so far
        self.turns = []    # per turn: dict(new, prompt, tokens, cached, replica, tries)
        self.last_replica = None

    def new_tokens(self, turn):
        start = [1] if turn == 0 else []  # BOS first, as photon generate --tokens is given it
        return start + [20 + (self.number * 53 + turn * 31 + k * 7) % 900 for k in range(NEW_TOKENS)]


def run_turn(cluster, conv, turn, max_tokens, via_balancer, on_token=None):
    new = conv.new_tokens(turn)
    prompt = conv.history + new
    tries, last_error = 0, None
    while tries < TRIES:
        tries += 1
        if via_balancer and tries <= 3:
            port = cluster.haproxy.port
        else:
            # Neither the last turn's replica nor the one HAProxy sends the next turn to.
            alive = list(cluster.alive)
            avoid = {conv.last_replica, cluster.balanced_replica(conv.id)}
            others = ([i for i in alive if i not in avoid] or
                      [i for i in alive if i != conv.last_replica] or alive)
            port = cluster.replicas[others[(conv.number + tries) % len(others)]].port
        try:
            tokens, cached, served_by = stream_turn(port, conv.id, prompt, max_tokens,
                                                    on_token and (lambda: on_token(port)))
        except Cut as error:
            last_error = error
            time.sleep(0.2 * tries)
            continue
        replica = (cluster.index_of(served_by) if port == cluster.haproxy.port else
                   [i for i, r in enumerate(cluster.replicas) if r.port == port][0])
        conv.turns.append(dict(new=new, prompt=prompt, tokens=tokens, cached=cached,
                               replica=replica, tries=tries, balanced=port == cluster.haproxy.port))
        conv.history = prompt + tokens
        conv.last_replica = replica
        return
    raise RuntimeError("%s turn %d failed %d times: %s" % (conv.id, turn, TRIES, last_error))


def run_all(cluster, conversations, turn, max_tokens, on_token=None):
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(conversations)) as pool:
        futures = [pool.submit(run_turn, cluster, c, turn, max_tokens, turn % 2 == 0, on_token)
                   for c in conversations]
        for f in futures:
            try:
                f.result(timeout=300)
            except Exception as error:  # a failed turn fails the check, not the whole test
                check(False, "turn %d: %r" % (turn, error))


def reference_tokens(conv):
    """The conversation through photon generate, following the server: --resume where the
    server continued the stored state, a fresh session over the whole prompt where it did not."""
    ref = serve.Reference(serve.KJV, conv.id, ["--temperature", 0])
    out = []
    for turn, t in enumerate(conv.turns):
        n = KILL_TURN_TOKENS if turn == 1 else MAX_TOKENS
        if t["cached"] == 0:
            _, record = ref.turn(n, tokens=t["prompt"], resume=False)
        else:
            _, record = ref.turn(n, tokens=t["new"])
        out.append(record.get("tokens"))
    return out


def group_conversations(cluster):
    conversations = [Conversation(i) for i in range(CONVERSATIONS)]
    victim = 2
    victim_streaming = threading.Event()

    run_all(cluster, conversations, 0, MAX_TOKENS)
    served = {c.turns[0]["replica"] for c in conversations if c.turns}
    check(served == {0, 1, 2}, "turn 0 through HAProxy reaches every replica: %s" % served)

    # Turn 1, direct to replicas: the victim is killed once it streams.
    victim_port = cluster.replicas[victim].port

    def killer():
        # At the victim's first streamed token: its turns of 24 tokens can all end within tens of
        # milliseconds on an idle machine, and a later kill then cuts none of them.
        victim_streaming.wait(timeout=60)
        cluster.kill(victim)

    kill_thread = threading.Thread(target=killer)
    kill_thread.start()
    try:
        run_all(cluster, conversations, 1, KILL_TURN_TOKENS,
                lambda port: victim_streaming.set() if port == victim_port else None)
    finally:
        victim_streaming.set()
        kill_thread.join(timeout=90)
    check(victim not in cluster.alive, "a replica was killed with SIGKILL during turn 1")
    retried = sum(1 for c in conversations if len(c.turns) > 1 and c.turns[1]["tries"] > 1)
    check(retried > 0, "turns cut by the kill were retried: %d" % retried)
    print("turn 1: %d turns retried after the kill" % retried)

    time.sleep(2.5)  # HAProxy's health checks (inter 1s, fall 2) take the dead replica out
    run_all(cluster, conversations, 2, MAX_TOKENS)
    # Consistent hashing: a conversation whose replica survived stays on it.
    moved = [c.id for c in conversations if len(c.turns) > 2 and c.turns[0]["replica"] != victim
             and c.turns[2]["replica"] != c.turns[0]["replica"]]
    check(not moved, "HAProxy keeps conversations on their surviving replica: moved %s" % moved)

    errors_before = cluster.metric("photon_conversation_store_errors_total")
    cluster.redis.stop()
    run_all(cluster, conversations, 3, MAX_TOKENS)
    errors = cluster.metric("photon_conversation_store_errors_total") - errors_before
    check(errors >= 2 * CONVERSATIONS,
          "with Redis down every load and save is a counted store error: %d" % errors)
    cluster.redis.start()
    time.sleep(1.5)  # the replicas try to reconnect at most once a second
    full_before = cluster.metric("photon_conversations_full_prefill_total")
    run_all(cluster, conversations, 4, MAX_TOKENS)
    full = cluster.metric("photon_conversations_full_prefill_total") - full_before
    check(full == CONVERSATIONS, "after Redis restarted empty, turns read whole: %d" % full)
    run_all(cluster, conversations, 5, MAX_TOKENS)

    for c in conversations:
        if not check(len(c.turns) == TURNS, "%s: all %d turns answered" % (c.id, TURNS)):
            continue
        for turn in range(1, TURNS):
            # Except where HAProxy moved the conversation because its replica died.
            if turn == 2 and c.turns[0]["replica"] == victim:
                continue
            check(c.turns[turn]["replica"] != c.turns[turn - 1]["replica"],
                  "%s turn %d on another replica than turn %d" % (c.id, turn, turn - 1))
        for turn, t in enumerate(c.turns):
            history = len(t["prompt"]) - len(t["new"])
            if turn in (0, 3, 4):
                check(t["cached"] == 0, "%s turn %d read whole: %d cached" % (c.id, turn, t["cached"]))
            elif t["tries"] == 1 or turn > 2:
                check(t["cached"] == history, "%s turn %d continued the stored state: %d of %d"
                      % (c.id, turn, t["cached"], history))
            else:  # retried after the kill: continued, or whole if the killed replica had saved
                check(t["cached"] in (0, history), "%s turn %d: %d cached" % (c.id, turn, t["cached"]))
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        references = list(pool.map(reference_tokens, [c for c in conversations if len(c.turns) == TURNS]))
    for c, expected in zip([c for c in conversations if len(c.turns) == TURNS], references):
        for turn, t in enumerate(c.turns):
            check(t["tokens"] == expected[turn], "%s turn %d: tokens %s = photon generate's %s"
                  % (c.id, turn, t["tokens"], expected[turn]))


def completion(replica, conversation, prompt, max_tokens):
    out = serve.completion(replica, prompt, max_tokens, headers={"X-Conversation-Id": conversation})
    return out or dict(tokens=[], usage={"prompt_tokens_details": {"cached_tokens": -1}}, headers={})


def cached(out):
    return out["usage"]["prompt_tokens_details"]["cached_tokens"]


def group_race(cluster):
    """Two replicas finish a turn of one conversation at once: one saves, the other's save is
    refused (Conflict), counted, and its reply carries no X-Conversation-Version."""
    a, b = (cluster.replicas[i] for i in cluster.alive[:2])
    first = [1, 40, 41, 42]
    out = completion(a, "race", first, MAX_TOKENS)
    check(out["headers"].get("x-conversation-version") == "1", "race: turn 0 saved as version 1")
    history = first + out["tokens"]
    conflicts = cluster.metric("photon_conversation_conflicts_total")
    prompts = {a: history + [50, 51], b: history + [60, 61]}
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {r: pool.submit(completion, r, "race", prompts[r], 48) for r in (a, b)}
        outs = {r: f.result(timeout=300) for r, f in futures.items()}
    versions = sorted(o["headers"].get("x-conversation-version", "none") for o in outs.values())
    check(versions == ["2", "none"], "race: one reply saved version 2, the other none: %s" % versions)
    check(cluster.metric("photon_conversation_conflicts_total") - conflicts == 1,
          "race: the losing save is counted as a conflict")
    check(all(cached(o) == len(history) for o in outs.values()), "race: both turns continued v1")
    stored = cluster.redis.command("HGET", KEY_PREFIX + "race", "v")
    check(stored == b"2", "race: Redis holds version 2: %r" % stored)
    # The stored conversation is the winner's: continuing it resumes, continuing the loser's
    # reads whole.
    winner = next(r for r, o in outs.items() if o["headers"].get("x-conversation-version") == "2")
    loser = b if winner is a else a
    for r, expect_resumed in ((winner, True), (loser, False)):
        h = prompts[r] + outs[r]["tokens"]
        out = completion(a, "race", h + [70], MAX_TOKENS)
        check((cached(out) == len(h)) == expect_resumed,
              "race: continuing the %s's turn %s" % ("winner" if expect_resumed else "loser",
                                                   "resumes" if expect_resumed else "reads whole"))


def fnv1a(data):
    h = 0xcbf29ce484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def split_record(record):
    """A record (src/cli/serve/conversation_record.h) -> (its bytes before the state's length,
    the state)."""
    at = 8 + 8 + 4
    at += 8 + struct.unpack_from("<Q", record, at)[0]      # the text
    at += 8 + 4 * struct.unpack_from("<Q", record, at)[0]  # the tokens
    n = struct.unpack_from("<Q", record, at)[0]
    check(at + 8 + n + 8 == len(record), "the record's layout")
    return record[:at], record[at + 8:at + 8 + n]


def with_state(record, state):
    """The record with another state and a checksum that matches."""
    body = split_record(record)[0] + struct.pack("<Q", len(state)) + state
    return body + struct.pack("<Q", fnv1a(body))


def group_damage(cluster):
    """A damaged record, a record whose state is damaged, and a value that is no conversation:
    each refused and counted, the turn read whole (equal to a fresh photon generate), and the
    conversation saved over it."""
    r = cluster.replicas[cluster.alive[0]]
    redis = cluster.redis
    cases = []
    for name in ("damaged-record", "damaged-state"):
        first = [1, 300, 301]
        out = completion(r, name, first, MAX_TOKENS)
        key = KEY_PREFIX + name
        record = redis.command("HGET", key, "d")
        if name == "damaged-record":
            middle = len(record) // 2
            record = record[:middle] + bytes([record[middle] ^ 0xFF]) + record[middle + 1:]
        else:
            state = split_record(record)[1]
            check(len(state) > 1000, "%s: the state is the record's bulk" % name)
            record = with_state(record, state[:len(state) // 2])
        check(redis.command("HSET", key, "d", record) == 0, "%s: written into Redis" % name)
        cases.append((name, first + out["tokens"] + [302, 303], "2"))
    check(redis.command("SET", KEY_PREFIX + "foreign", "not a conversation") == "OK",
          "foreign: a string value written into Redis")
    cases.append(("foreign", [1, 310, 311], "1"))
    for name, prompt, version in cases:
        refused = cluster.metric("photon_conversation_states_refused_total")
        out = completion(r, name, prompt, MAX_TOKENS)
        check(cached(out) == 0, "%s: the turn reads its whole prompt" % name)
        check(cluster.metric("photon_conversation_states_refused_total") - refused == 1,
              "%s: refused and counted" % name)
        check(out["headers"].get("x-conversation-version") == version,
              "%s: saved over it as version %s: %s" % (name, version, out["headers"]))
        _, expected = serve.generate(serve.KJV, "--temperature", 0, "-n", MAX_TOKENS, "--tokens",
                                     ",".join(map(str, prompt)))
        check(out["tokens"] == expected.get("tokens"), "%s: tokens = a fresh photon generate" % name)


def main():
    global SOURCE, WORK, serve
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--photon", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop what was started
    SOURCE, WORK = os.path.abspath(args.source_dir), os.path.abspath(args.work_dir)
    os.makedirs(WORK, exist_ok=True)
    sys.path.insert(0, os.path.join(SOURCE, "tests", "serve"))
    import test_serve
    serve = test_serve
    serve.PHOTON, serve.WORK, serve.SOURCE = os.path.abspath(args.photon), WORK, SOURCE

    started = time.time()
    cluster = Cluster()
    try:
        cluster.start()
        for group in (group_conversations, group_race, group_damage):
            group(cluster)
            print("%s done at %.0f s" % (group.__name__, time.time() - started))
    except Exception as error:  # a crash of the test itself counts as a failure
        check(False, "%r" % error)
        raise
    finally:
        cluster.stop()
        print("%d passed, %d failed (%.0f s)" % (serve.PASSED, serve.FAILED, time.time() - started))
    return 1 if serve.FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
