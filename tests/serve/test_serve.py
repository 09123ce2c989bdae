#!/usr/bin/env python3
"""End-to-end tests of `photon serve` over loopback HTTP.

usage: test_serve.py --photon BIN --work-dir DIR [--device DEV] ... GROUP

GROUP is `setup` (writes the models the other groups use), one of usage, api, errors, busy,
many, equality, conversation, disconnect, shutdown, soak, or node_setup / openai_node (the official
`openai` npm client). Every group starts its own servers on port 0 (loopback only) and stops them
with SIGTERM at its end; every wait is bounded. Replies are compared with `photon generate`, run
on the same model (one session per prompt; resumed with --resume for conversations), on the
device --device names (the CPU by default). Standard library only. Prints "N passed, N failed"
and exits non-zero when a check failed.
"""

import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

PHOTON = ""
WORK = ""
SOURCE = ""
WRITE_TEMPLATE_MODEL = ""
NODE_DIR = ""
NPM = ""
NODE = ""
DEVICE = []  # ["--device", DEV] for the servers and photon generate alike
PASSED = 0
FAILED = 0
LOCK = threading.Lock()

KJV = "photon-kjv"
SMALL = "photon-small"
VANILLA = "vanilla-small"
TEMPLATED = "templated-small"
TRANSCRIPT_STOP = "\nUser:"
TEST_TEMPLATE = {"bos": True, "begin": "[chat]",
                 "roles": {"system": {"prefix": "<sys>", "suffix": "</sys>"},
                           "user": {"prefix": "<u>", "suffix": "</u>"},
                           "assistant": {"prefix": "<a>", "suffix": "</a>"}},
                 "stop": ["</a>"]}


def check(condition, message):
    global PASSED, FAILED
    with LOCK:
        if condition:
            PASSED += 1
        else:
            FAILED += 1
            print("FAIL: " + message, file=sys.stderr)
    return condition


def model(name):
    if name == KJV:
        return os.path.join(SOURCE, "models", "photon-kjv.photon")
    return os.path.join(WORK, name + ".photon")


def run_photon(*argv, timeout=300):
    proc = subprocess.run([PHOTON] + [str(a) for a in argv], capture_output=True, timeout=timeout)
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


def generate(name, *argv):
    """photon generate --json -> (generated text, the JSON record). With -p, the text printed
    before the JSON line starts with the prompt, which is removed here."""
    argv = [str(a) for a in argv]
    rc, out, err = run_photon("generate", "-m", model(name), "--json", *DEVICE, *argv)
    if not check(rc == 0, "photon generate %s failed: %s" % (" ".join(argv), err)):
        return "", {}
    lines = out.split("\n")
    text, record = "\n".join(lines[:-2]), json.loads(lines[-2])
    if "-p" in argv:
        prompt = argv[argv.index("-p") + 1]
        check(text.startswith(prompt), "generate echoes the prompt")
        text = text[len(prompt):]
    return text, record


# ---------------------------------------------------------------------------------------------
# A server under test


class Server:
    """photon serve on 127.0.0.1 and a free port, its stderr in a log file of its own (groups run
    in parallel share WORK)."""

    started = 0

    def __init__(self, name, *flags, env=None, wait_ready=True):
        self.name = name
        self.flags = [str(f) for f in flags]
        Server.started += 1
        self.log_path = os.path.join(WORK, "server-%d-%d.log" % (os.getpid(), Server.started))
        self.log = open(self.log_path, "w")
        argv = [PHOTON, "serve", "-m", model(name), "--host", "127.0.0.1", "--port", "0"] + DEVICE
        argv += self.flags
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.log, env=env)
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline and self.port is None:
            match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.text())
            if match:
                self.port = int(match.group(1))
            elif self.proc.poll() is not None:
                break
            else:
                time.sleep(0.05)
        if self.port is None:
            self.kill()
            raise RuntimeError("photon serve did not start:\n" + self.text())
        while wait_ready and time.time() < deadline and "ready:" not in self.text():
            if self.proc.poll() is not None:
                raise RuntimeError("photon serve exited:\n" + self.text())
            time.sleep(0.05)

    def text(self):
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.stop()
        self.log.close()

    def stop(self, timeout=40):
        """SIGTERM; the server must exit 0 within `timeout` seconds."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = "killed after %d s" % timeout
        check(rc == 0, "SIGTERM: photon serve exits 0, got %s\n%s" % (rc, self.text()[-3000:]))
        return rc

    def kill(self):
        self.proc.kill()
        self.proc.wait(timeout=30)

    def connect(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=60):
        """-> (status, headers as a dict with lower-case names, body bytes)."""
        conn = self.connect(timeout)
        try:
            data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            conn.request(method, path, body=data, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def post(self, path, body, headers=None, timeout=120):
        status, head, data = self.request("POST", path, body, headers, timeout)
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = {"unparsed": data.decode("utf-8", "replace")}
        return status, head, parsed

    def stream(self, path, body, headers=None, timeout=120):
        """A streamed request -> (status, headers, events, comments); events are the parsed
        `data:` payloads, "[DONE]" as the string."""
        conn = self.connect(timeout)
        try:
            conn.request("POST", path, body=json.dumps(body).encode(), headers=headers or {})
            resp = conn.getresponse()
            head = {k.lower(): v for k, v in resp.getheaders()}
            if resp.status != 200:
                return resp.status, head, [json.loads(resp.read())], []
            events, comments = [], []
            for raw in iter(resp.readline, b""):
                line = raw.decode("utf-8").rstrip("\n")
                if line.startswith("data: "):
                    payload = line[6:]
                    events.append(payload if payload == "[DONE]" else json.loads(payload))
                elif line.startswith(":"):
                    comments.append(line)
            return resp.status, head, events, comments
        finally:
            conn.close()

    def metrics(self):
        status, head, data = self.request("GET", "/metrics")
        check(status == 200 and head.get("content-type", "").startswith("text/plain"),
              "/metrics answers Prometheus text")
        values = {}
        for line in data.decode().split("\n"):
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return values

    def wait_metric(self, predicate, seconds):
        """Polls /metrics until predicate(values) holds; -> seconds taken, or None."""
        start = time.time()
        while time.time() - start < seconds:
            if predicate(self.metrics()):
                return time.time() - start
            time.sleep(0.01)
        return None


def completion(server, prompt, max_tokens, stream=False, headers=None, **extra):
    body = dict(model=server.name, prompt=prompt, max_tokens=max_tokens, temperature=0,
                return_token_ids=True)
    body.update(extra)
    if stream:
        body["stream"] = True
        return stream_text(server, "/v1/completions", body, headers)
    status, head, out = server.post("/v1/completions", body, headers)
    if not check(status == 200, "completion -> %d %s" % (status, out)):
        return None
    choice = out["choices"][0]
    return dict(text=choice["text"], tokens=choice["token_ids"], finish=choice["finish_reason"],
                usage=out["usage"], headers=head, raw=out)


def chat(server, messages, max_tokens, stream=False, headers=None, **extra):
    body = dict(model=server.name, messages=messages, max_tokens=max_tokens, temperature=0,
                return_token_ids=True)
    body.update(extra)
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        return stream_text(server, "/v1/chat/completions", body, headers)
    status, head, out = server.post("/v1/chat/completions", body, headers)
    if not check(status == 200, "chat -> %d %s" % (status, out)):
        return None
    choice = out["choices"][0]
    return dict(text=choice["message"]["content"], tokens=choice["token_ids"],
                finish=choice["finish_reason"], usage=out["usage"], headers=head, raw=out)


def stream_text(server, path, body, headers=None):
    """Streams and checks the chunk protocol -> dict like completion()'s."""
    status, head, events, _ = server.stream(path, body, headers)
    if not check(status == 200, "%s stream -> %d %s" % (path, status, events)):
        return None
    check(head.get("content-type") == "text/event-stream" and head.get("x-accel-buffering") == "no"
          and head.get("cache-control") == "no-cache" and "x-request-id" in head,
          "stream headers: %s" % head)
    check(events and events[-1] == "[DONE]", "a stream ends with [DONE]")
    chunks = [e for e in events if e != "[DONE]"]
    chat_stream = path.endswith("chat/completions")
    usage = None
    if body.get("stream_options", {}).get("include_usage"):
        usage = chunks[-1].get("usage")
        check(chunks[-1].get("choices") == [] and usage is not None, "the usage chunk comes last")
        check(all(c.get("usage", "absent") is None for c in chunks[:-1]), "usage is null before")
        chunks = chunks[:-1]
    text, tokens, finish = "", [], None
    for i, c in enumerate(chunks):
        check(c["object"] == ("chat.completion.chunk" if chat_stream else "text_completion"),
              "chunk object: %s" % c)
        choice = c["choices"][0]
        if chat_stream:
            delta = choice["delta"]
            if i == 0:
                check(delta.get("role") == "assistant", "the first delta has the role: %s" % c)
            text += delta.get("content", "")
        else:
            text += choice["text"]
        tokens += choice.get("token_ids", [])
        if choice["finish_reason"] is not None:
            check(i == len(chunks) - 1, "only the last chunk has a finish reason")
            finish = choice["finish_reason"]
    check(finish in ("stop", "length"), "a finish reason: %s" % finish)
    check(len({c["id"] for c in chunks}) == 1, "one id for the whole stream")
    return dict(text=text, tokens=tokens, finish=finish, usage=usage, headers=head, events=events)


start = Server


def render_transcript(messages):
    """The plain transcript template (docs/serving.md), written out independently."""
    text = ""
    for m in messages:
        text += {"system": "%s\n\n", "user": "User: %s\n", "assistant": "Assistant:%s\n"}[m["role"]] % m["content"]
    return text + "Assistant:"


def render_test_template(messages):
    t = TEST_TEMPLATE
    text = t["begin"]
    for m in messages:
        role = t["roles"][m["role"]]
        text += role["prefix"] + m["content"] + role["suffix"]
    return text + t["roles"]["assistant"]["prefix"]


def cut_at_stop(text, stops):
    cut = len(text)
    for s in stops:
        at = text.find(s)
        if at >= 0:
            cut = min(cut, at)
    return text[:cut]


# ---------------------------------------------------------------------------------------------
# Groups


def group_setup():
    os.makedirs(WORK, exist_ok=True)
    for preset, seed in [(SMALL, 1), (VANILLA, 2)]:
        rc, _, err = run_photon("init", "--preset", preset, "--seed", seed, "-o", model(preset))
        check(rc == 0, "init %s: %s" % (preset, err))
    template = os.path.join(WORK, "template.json")
    with open(template, "w") as f:
        json.dump(TEST_TEMPLATE, f)
    proc = subprocess.run([WRITE_TEMPLATE_MODEL, model(TEMPLATED), template], capture_output=True)
    check(proc.returncode == 0, "write the templated model: %s" % proc.stderr)


def group_usage():
    """The command line: usage errors exit 2, a server that cannot start exits 1."""
    rc, _, err = run_photon("serve", "--help")
    check(rc == 0, "serve --help")
    rc, out, _ = run_photon("help", "serve")
    check(rc == 0 and out.startswith("usage: photon serve"), "help serve")
    for argv, fragment in [(["--port", "70000"], "--port"), (["--max-running", "0"], "--max-running"),
                           (["--header-timeout", "-1"], "--header-timeout"),
                           (["--mode", "sideways"], "--mode"), (["--frob"], "--frob")]:
        rc, _, err = run_photon("serve", "-m", model(KJV), *argv)
        check(rc == 2 and fragment in err, "serve %s -> exit 2 naming it: %d %s" % (argv, rc, err))
    rc, _, err = run_photon("serve", "-m", os.path.join(WORK, "missing.photon"), "--port", "0")
    check(rc == 1 and "missing.photon" in err, "a missing model exits 1: %d %s" % (rc, err))
    rc, _, err = run_photon("serve", "-m", model(KJV), "--port", "0",
                            "--store", os.path.join(WORK, "no", "such", "dir"))
    check(rc == 1 and "store" in err, "an unusable store exits 1: %d %s" % (rc, err))
    rc, _, err = run_photon("serve", "-m", model(KJV), "--port", "0", "--mode", "recgen",
                            "-m", model(VANILLA))
    check(rc == 1 and "sessions" in err, "a mode the model cannot run exits 1: %d %s" % (rc, err))
    with start(KJV) as server:
        # A second server on the same port cannot listen.
        rc, _, err = run_photon("serve", "-m", model(KJV), "--port", server.port)
        check(rc == 1 and "listen" in err, "a port in use exits 1: %d %s" % (rc, err))


def group_api():
    """Every endpoint's answer and wire format, on the shipped model, against photon generate."""
    prompt = "In the beginning God created"
    with start(KJV, "--store", os.path.join(WORK, "api-store")) as s:
        status, _, health = s.request("GET", "/health")
        check(status == 200 and json.loads(health) == {"status": "ok"}, "/health when ready")
        status, _, models = s.request("GET", "/v1/models")
        models = json.loads(models)
        check(status == 200 and models["object"] == "list" and models["data"][0]["id"] == KJV
              and models["data"][0]["object"] == "model", "/v1/models: %s" % models)
        status, _, one = s.request("GET", "/v1/models/" + KJV)
        check(status == 200 and json.loads(one)["id"] == KJV, "/v1/models/ID")

        # Greedy completion: text and tokens equal photon generate's; the usage adds up.
        ref_text, ref = generate(KJV, "-p", prompt, "-n", 20)
        out = completion(s, prompt, 20)
        check(out["tokens"] == ref["tokens"], "completion tokens = generate's")
        check(out["text"] == ref_text, "completion text = generate's: %r vs %r" % (out["text"], ref_text))
        check(out["usage"] == {"prompt_tokens": ref["prompt_tokens"], "completion_tokens": 20,
                               "total_tokens": ref["prompt_tokens"] + 20,
                               "prompt_tokens_details": {"cached_tokens": 0}},
              "usage: %s" % out["usage"])
        raw = out["raw"]
        check(raw["object"] == "text_completion" and raw["id"].startswith("cmpl-")
              and raw["model"] == KJV and isinstance(raw["created"], int), "completion fields")
        check(out["finish"] == ("length" if ref["stop_reason"] == "length" else "stop"), "finish")
        streamed = completion(s, prompt, 20, stream=True, stream_options={"include_usage": True})
        check(streamed["text"] == ref_text and streamed["tokens"] == ref["tokens"],
              "streamed completion = generate's")
        # The same prompt again comes from the prefix cache whole.
        check(streamed["usage"] == dict(out["usage"], prompt_tokens_details={
            "cached_tokens": out["usage"]["prompt_tokens"]}), "streamed usage: %s" % streamed["usage"])
        # Token ids as the prompt.
        ids = ref["tokens"][:5]
        _, ref_ids = generate(KJV, "--tokens", ",".join(map(str, [1] + ids)), "-n", 10)
        check(completion(s, [1] + ids, 10)["tokens"] == ref_ids["tokens"], "a prompt of token ids")
        check(completion(s, [[1] + ids], 10)["tokens"] == ref_ids["tokens"], "[[ids]]")
        # Without max_tokens a completion has OpenAI's 16.
        status, _, out16 = s.post("/v1/completions", {"model": KJV, "prompt": prompt, "temperature": 0,
                                                     "ignore_eos": True})
        check(status == 200 and out16["usage"]["completion_tokens"] == 16, "default max_tokens 16")

        # Log-probabilities: each chosen token's, as photon generate reports them.
        status, _, lp = s.post("/v1/completions", {"model": KJV, "prompt": prompt, "max_tokens": 8,
                                                   "temperature": 0, "logprobs": 0})
        lp = lp["choices"][0]["logprobs"]
        check(status == 200 and len(lp["token_logprobs"]) == 8 and lp["top_logprobs"] is None
              and all(abs(a - b) < 1e-5 for a, b in zip(lp["token_logprobs"], ref["logprobs"])),
              "completion logprobs = generate's: %s" % lp)
        check("".join(lp["tokens"]) == generate(KJV, "-p", prompt, "-n", 8)[0]
              and lp["text_offset"][0] == 0, "logprobs tokens and offsets")

        # Alternatives: each token's most likely ids, as photon generate --top-logprobs lists them
        # (completions key them by text, keeping the likeliest of alternatives that read alike).
        _, alt = generate(KJV, "-p", prompt, "-n", 8, "--top-logprobs", 3)

        def same_alternatives(listed, ref):
            values = [v for _, v in ref]
            return (0 < len(listed) <= 3 and abs(max(listed) - values[0]) < 1e-5
                    and all(any(abs(v - r) < 1e-5 for r in values) for v in listed))
        body = {"model": KJV, "prompt": prompt, "max_tokens": 8, "temperature": 0, "logprobs": 3}
        status, _, out = s.post("/v1/completions", body)
        tops = out["choices"][0]["logprobs"]["top_logprobs"]
        check(status == 200 and len(tops) == 8 and all(
            same_alternatives(list(t.values()), a) for t, a in zip(tops, alt["top_logprobs"])),
            "completion top_logprobs = generate's: %s vs %s" % (tops, alt["top_logprobs"]))
        check(all(abs(max(t.values()) - v) < 1e-6
                  for t, v in zip(tops, out["choices"][0]["logprobs"]["token_logprobs"])),
              "greedy picks the likeliest alternative")
        streamed = stream_text(s, "/v1/completions", dict(body, stream=True))
        streamed_tops = [t for e in streamed["events"] if e != "[DONE]"
                         for t in (e["choices"][0]["logprobs"] or {}).get("top_logprobs") or []]
        check(streamed_tops == tops, "streamed top_logprobs = the reply's: %s" % streamed_tops)
        status, _, out = s.post("/v1/chat/completions", {
            "model": KJV, "messages": [{"role": "user", "content": "Who made the heaven?"}],
            "max_tokens": 4, "temperature": 0, "logprobs": True, "top_logprobs": 2})
        _, chat_alt = generate(KJV, "-p", render_transcript(
            [{"role": "user", "content": "Who made the heaven?"}]), "-n", 4, "--top-logprobs", 2,
            "--stop", TRANSCRIPT_STOP)
        content = out["choices"][0]["logprobs"]["content"]
        check(status == 200 and all(
            len(c["top_logprobs"]) == 2
            and all(abs(t["logprob"] - r[1]) < 1e-5 and bytes(t["bytes"]).decode(errors="replace") == t["token"]
                    for t, r in zip(c["top_logprobs"], a))
            for c, a in zip(content, chat_alt["top_logprobs"])),
            "chat top_logprobs = generate's: %s vs %s" % (content, chat_alt["top_logprobs"]))

        # Sampling with a seed draws what photon generate draws.
        sampling = {"temperature": 0.9, "top_k": 40, "top_p": 0.95, "seed": 7}
        ref_text, ref = generate(KJV, "-p", prompt, "-n", 24, "--temperature", 0.9, "--top-k", 40,
                                 "--top-p", 0.95, "--seed", 7)
        out = completion(s, prompt, 24, **sampling)
        check(out["tokens"] == ref["tokens"], "seeded sampling = generate's")

        # OpenAI's penalties and logit bias, over a penalty window of 512, are generate's flags.
        _, greedy = generate(KJV, "-p", prompt, "-n", 24)
        banned = greedy["tokens"][2]
        _, plain = generate(KJV, "-p", prompt, "-n", 24, "--temperature", 0.8, "--seed", 3)
        _, ref = generate(KJV, "-p", prompt, "-n", 24, "--temperature", 0.8, "--seed", 3,
                          "--presence-penalty", 0.7, "--frequency-penalty", 0.4,
                          "--repeat-last-n", 512, "--logit-bias", "%d=-100" % banned,
                          "--logit-bias", "5=2.5")
        out = completion(s, prompt, 24, temperature=0.8, seed=3, presence_penalty=0.7,
                         frequency_penalty=0.4, repeat_last_n=512,
                         logit_bias={str(banned): -100, "5": 2.5})
        check(out["tokens"] == ref["tokens"], "penalties and logit bias = generate's")
        check(ref["tokens"] != plain["tokens"] and banned not in ref["tokens"],
              "the penalties and the bias change the draw; a bias of -100 bans token %d" % banned)
        out = completion(s, prompt, 24, temperature=0, logit_bias={str(banned): -100})
        first = greedy["tokens"].index(banned)
        check(banned not in out["tokens"] and out["tokens"][:first] == greedy["tokens"][:first],
              "greedy decoding with a banned token: %s vs %s" % (out["tokens"], greedy["tokens"]))

        # A stop string: the reply ends before it, finish_reason stop.
        full_text, _ = generate(KJV, "-p", prompt, "-n", 30, "--ignore-eos")
        words = full_text.split(" ")
        stop = " " + words[3] if len(words) > 4 else words[-1]
        expected = cut_at_stop(full_text, [stop])
        for stream in (False, True):
            out = completion(s, prompt, 30, stream=stream, stop=[stop], ignore_eos=True)
            check(out["text"] == expected and out["finish"] == "stop",
                  "stop %r (stream %s): %r vs %r" % (stop, stream, out["text"], expected))

        # Chat: the transcript template; the reply stops before "\nUser:".
        messages = [{"role": "system", "content": "The words of the LORD."},
                    {"role": "user", "content": "Who made the heaven and the earth?"}]
        rendered = render_transcript(messages)
        ref_text, ref = generate(KJV, "-p", rendered, "-n", 24, "--stop", TRANSCRIPT_STOP)
        out = chat(s, messages, 24)
        check(out["tokens"] == ref["tokens"], "chat tokens = generate's on the rendered transcript")
        check(out["text"] == cut_at_stop(ref_text, [TRANSCRIPT_STOP]), "chat text")
        raw = out["raw"]
        check(raw["object"] == "chat.completion" and raw["id"].startswith("chatcmpl-")
              and raw["choices"][0]["message"]["role"] == "assistant", "chat fields")
        streamed = chat(s, messages, 24, stream=True)
        check(streamed["text"] == out["text"] and streamed["tokens"] == out["tokens"]
              and streamed["usage"] == dict(out["usage"], prompt_tokens_details={
                  "cached_tokens": out["usage"]["prompt_tokens"]}), "streamed chat = non-streamed")
        status, _, lp = s.post("/v1/chat/completions", {"model": KJV, "messages": messages,
                                                        "max_tokens": 4, "temperature": 0,
                                                        "logprobs": True})
        content = lp["choices"][0]["logprobs"]["content"]
        check(status == 200 and len(content) == 4 and all(
            abs(c["logprob"] - r) < 1e-5 and bytes(c["bytes"]).decode() == c["token"]
            for c, r in zip(content, ref["logprobs"])), "chat logprobs: %s" % content)

        # x-request-id: the client's when it gives a usable one.
        out = completion(s, prompt, 2, headers={"X-Request-Id": "my-request-1"})
        check(out["headers"].get("x-request-id") == "my-request-1", "x-request-id is echoed")

        # The metrics count what happened.
        values = s.metrics()
        counted = (values.get('photon_http_requests_total{route="/v1/completions",status="200"}'),
                   values.get('photon_http_requests_total{route="/v1/chat/completions",status="200"}'))
        check(counted == (14, 4), "requests by route and status: %s" % (counted,))
        check(values.get("photon_request_first_token_seconds_count") == 18
              and values.get('photon_request_queue_seconds_bucket{le="+Inf"}') == 18,
              "queue and first-token histograms: one observation per request")
        for name in ["photon_engine_requests_running", "photon_engine_requests_waiting",
                     "photon_engine_requests_paused", "photon_engine_generated_tokens_total",
                     "photon_engine_prompt_tokens_total", "photon_engine_reused_tokens_total",
                     "photon_engine_memory_bytes", "process_resident_memory_bytes",
                     "process_open_fds", "photon_request_token_gap_seconds_sum"]:
            check(name in values, "metric " + name)

    # A model with its own chat template in its metadata.
    with start(TEMPLATED) as s:
        messages = [{"role": "user", "content": "hello"}]
        rendered = render_test_template(messages)
        ref_text, ref = generate(TEMPLATED, "-p", rendered, "-n", 12, "--stop", "</a>")
        out = chat(s, messages, 12)
        check(out["tokens"] == ref["tokens"], "the model's own chat template renders the prompt")
    # --chat-template overrides it.
    template = os.path.join(WORK, "override.json")
    with open(template, "w") as f:
        json.dump({"roles": {"user": {"prefix": "Q: ", "suffix": "\n"},
                             "assistant": {"prefix": "A:", "suffix": "\n"}}}, f)
    with start(TEMPLATED, "--chat-template", template) as s:
        _, ref = generate(TEMPLATED, "-p", "Q: hello\nA:", "-n", 12)
        check(chat(s, [{"role": "user", "content": "hello"}], 12)["tokens"] == ref["tokens"],
              "--chat-template")
        status, _, out = s.post("/v1/chat/completions", {"model": TEMPLATED, "max_tokens": 2,
                                                         "messages": [{"role": "system", "content": "x"}]})
        check(status == 400 and "system" in out["error"]["message"], "a role the template lacks")


def expect_error(status, out, code, fragment=None, param=None, what=""):
    error = out.get("error", {}) if isinstance(out, dict) else {}
    ok = check(status == code, "%s: expected %d, got %d %s" % (what, code, status, out))
    ok &= check(set(error) == {"message", "type", "param", "code"} and bool(error["message"]),
                "%s: error in OpenAI's shape: %s" % (what, out))
    if fragment:
        ok &= check(fragment in error.get("message", ""), "%s: %r in %s" % (what, fragment, error))
    if param:
        ok &= check(error.get("param") == param, "%s: param %s: %s" % (what, param, error))
    return ok


def raw_exchange(server, data, seconds=10):
    """Sends raw bytes, reads until the server closes or `seconds` pass -> bytes."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=seconds)
    try:
        sock.sendall(data)
        got = b""
        deadline = time.time() + seconds
        while time.time() < deadline:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            got += chunk
        return got
    finally:
        sock.close()


def group_choices():
    """n choices: each the sampling of photon generate with the seeds seed, seed + 1, ...; streamed
    by index, each with its own finish; refused with a conversation or beyond 16."""
    prompt = "In the beginning God created"
    sampling = {"temperature": 0.9, "top_k": 40, "seed": 7, "ignore_eos": True}
    refs = [generate(KJV, "-p", prompt, "-n", 12, "--temperature", 0.9, "--top-k", 40,
                     "--seed", 7 + i, "--ignore-eos")[1]["tokens"] for i in range(3)]
    check(len({tuple(r) for r in refs}) > 1, "the three seeds draw different tokens")
    with start(KJV, "--store", os.path.join(WORK, "choices-store")) as s:
        status, _, out = s.post("/v1/completions", dict(model=KJV, prompt=prompt, max_tokens=12, n=3,
                                                        return_token_ids=True, **sampling))
        if check(status == 200 and len(out.get("choices", [])) == 3, "n=3 -> 3 choices: %s" % out):
            for i, choice in enumerate(out["choices"]):
                check(choice["index"] == i and choice["token_ids"] == refs[i],
                      "choice %d = generate --seed %d: %s vs %s" % (i, 7 + i, choice["token_ids"], refs[i]))
            check(out["usage"]["completion_tokens"] == 36 and out["usage"]["total_tokens"]
                  == out["usage"]["prompt_tokens"] + 36, "usage sums the choices: %s" % out["usage"])
        status, _, events, _ = s.stream("/v1/completions", dict(
            model=KJV, prompt=prompt, max_tokens=12, n=2, stream=True, return_token_ids=True,
            stream_options={"include_usage": True}, **sampling))
        check(status == 200 and events and events[-1] == "[DONE]", "n=2 stream ends with [DONE]")
        chunks = [e for e in events if e != "[DONE]"]
        check(chunks and chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 24,
              "the usage chunk sums both choices: %s" % chunks[-1:])
        by_index = {}
        for c in chunks[:-1]:
            check(len(c["choices"]) == 1, "one choice per chunk: %s" % c)
            by_index.setdefault(c["choices"][0]["index"], []).append(c["choices"][0])
        check(sorted(by_index) == [0, 1], "chunks of choices 0 and 1: %s" % sorted(by_index))
        for i, parts in by_index.items():
            tokens = [t for p in parts for t in p.get("token_ids", [])]
            finishes = [p["finish_reason"] for p in parts if p["finish_reason"] is not None]
            check(tokens == refs[i], "streamed choice %d = generate --seed %d" % (i, 7 + i))
            check(finishes == ["length"] and parts[-1]["finish_reason"] == "length",
                  "choice %d ends once, with its last chunk: %s" % (i, finishes))
        messages = [{"role": "user", "content": "Who made the heaven and the earth?"}]
        status, _, out = s.post("/v1/chat/completions", dict(model=KJV, messages=messages,
                                                             max_tokens=8, n=2, **sampling))
        check(status == 200 and [c["index"] for c in out.get("choices", [])] == [0, 1]
              and all(c["message"]["role"] == "assistant" for c in out["choices"]),
              "chat n=2: %s" % out)
        status, _, out = s.post("/v1/completions", dict(model=KJV, prompt=prompt, max_tokens=4, n=2,
                                                        best_of=2))
        check(status == 200 and len(out.get("choices", [])) == 2, "best_of equal to n: %s" % out)
        status, _, out = s.post("/v1/completions", dict(model=KJV, prompt=prompt, max_tokens=4, n=2),
                                {"X-Conversation-Id": "two-choices"})
        check(status == 400 and out.get("error", {}).get("param") == "n",
              "n=2 with a conversation -> 400 naming n: %s" % out)


def score(name, tokens, top):
    """photon score --top-logprobs: each position's logprob and alternatives [[id, logprob], ...]."""
    rc, out, err = run_photon("score", "-m", model(name), "--tokens", ",".join(map(str, tokens)),
                              "--top-logprobs", top, "--json", *DEVICE)
    check(rc == 0, "photon score failed: %s" % err)
    return json.loads(out)


def group_prompts():
    """Several prompts per request, each with its n choices (index p * n + i, seed seed + p * n + i),
    and echo: the prompt before each choice and, with logprobs, the prompt's own logprobs and
    alternatives as photon score gives them, in the form an evaluation harness reads (a greedy
    check compares a token's logprob with its likeliest alternative's); the prefix cache."""
    sampling = {"temperature": 0.9, "top_k": 40, "seed": 11, "ignore_eos": True}
    prompts = ["In the beginning God created", [1, 531, 263, 1342]]
    refs = []
    for p, prompt in enumerate(prompts):
        given = ["-p", prompt] if isinstance(prompt, str) else ["--tokens", ",".join(map(str, prompt))]
        for i in range(2):
            refs.append(generate(KJV, *given, "-n", 6, "--temperature", 0.9, "--top-k", 40,
                                 "--seed", 11 + 2 * p + i, "--ignore-eos")[1])
    with start(KJV, "--store", os.path.join(WORK, "prompts-store")) as s:
        status, _, out = s.post("/v1/completions", dict(model=KJV, prompt=prompts, max_tokens=6, n=2,
                                                        return_token_ids=True, **sampling))
        if check(status == 200 and len(out.get("choices", [])) == 4, "2 prompts x n=2: %s" % out):
            for i, choice in enumerate(out["choices"]):
                check(choice["index"] == i and choice["token_ids"] == refs[i]["tokens"],
                      "choice %d = generate --seed %d: %s vs %s" % (i, 11 + i, choice["token_ids"],
                                                                   refs[i]["tokens"]))
            prompt_tokens = refs[0]["prompt_tokens"] + refs[2]["prompt_tokens"]
            check(out["usage"]["prompt_tokens"] == prompt_tokens
                  and out["usage"]["completion_tokens"] == 24, "usage counts each prompt once: %s"
                  % out["usage"])
        # Streamed: each choice's tokens under its own index.
        status, _, events, _ = s.stream("/v1/completions", dict(
            model=KJV, prompt=prompts, max_tokens=6, n=2, return_token_ids=True, stream=True, **sampling))
        check(status == 200 and events and events[-1] == "[DONE]", "streamed prompts end with [DONE]")
        by_index = {}
        for e in events[:-1]:
            by_index.setdefault(e["choices"][0]["index"], []).extend(e["choices"][0].get("token_ids", []))
        check(by_index == {i: r["tokens"] for i, r in enumerate(refs)}, "streamed prompts: %s" % by_index)

        # Echo with alternatives, on token prompts: the text starts with the prompt's, and the
        # prompt's logprobs and alternatives are photon score's.
        context = [1, 531, 263, 1342, 264]
        _, greedy = generate(KJV, "--tokens", ",".join(map(str, context)), "-n", 3, "--mode", "hiergen")
        followed = context + greedy["tokens"]
        odd = context + [4000, 17, 2500]  # not what the model expects
        body = dict(model=KJV, prompt=[followed, odd], max_tokens=1, temperature=0, logprobs=1,
                    echo=True, seed=1234)
        status, _, out = s.post("/v1/completions", body)
        ok = check(status == 200 and len(out.get("choices", [])) == 2, "echo of two prompts: %s" % out)
        greedy_flags = []
        for choice, tokens in zip(out["choices"] if ok else [], [followed, odd]):
            lp = choice["logprobs"]
            ref = score(KJV, tokens, 1)
            n = len(tokens)
            check(len(lp["tokens"]) == n + 1 and len(lp["token_logprobs"]) == n + 1
                  and lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None,
                  "the prompt's %d tokens, then the generated one: %s" % (n, lp))
            check(all(abs(a - b) < 1e-6 for a, b in zip(lp["token_logprobs"][1:n], ref["logprobs"][1:])),
                  "echoed logprobs = photon score's: %s vs %s" % (lp["token_logprobs"], ref["logprobs"]))
            check(all(abs(list(t.values())[0] - r[0][1]) < 1e-6
                      for t, r in zip(lp["top_logprobs"][1:n], ref["top_logprobs"][1:])),
                  "echoed alternatives = photon score's")
            check(choice["text"].startswith("".join(lp["tokens"][:n])), "the text starts with the prompt")
            check(lp["text_offset"][n] == len("".join(lp["tokens"][:n])), "offsets run on past the prompt")
            # What an evaluation harness computes for the continuation after the context.
            cont = slice(len(context), n)
            is_greedy = all(t == max(top.values()) for t, top in
                            zip(lp["token_logprobs"][cont], lp["top_logprobs"][cont]))
            expected = all(r[0][0] == t for r, t in zip(ref["top_logprobs"][cont], tokens[cont]))
            check(is_greedy == expected, "greedy as the harness reads it: %s vs %s" % (is_greedy, expected))
            greedy_flags.append(is_greedy)
        check(greedy_flags == [True, False], "the model's own continuation is greedy, the odd one "
              "is not: %s" % greedy_flags)

        # max_tokens 0 with echo: the prompt scored, nothing generated; streamed alike.
        text_prompt = "And God said, Let there be light"
        for stream in (False, True):
            request = dict(model=KJV, prompt=text_prompt, max_tokens=0, echo=True, logprobs=0)
            if stream:
                events = stream_text(s, "/v1/completions", dict(request, stream=True))["events"]
                choices = [e["choices"][0] for e in events[:-1]]
                text = "".join(c["text"] for c in choices)
                check([c["finish_reason"] for c in choices][-1] == "length", "streamed echo ends")
                lp = choices[0]["logprobs"]
            else:
                status, _, out = s.post("/v1/completions", request)
                check(status == 200 and out["usage"]["completion_tokens"] == 0, "max_tokens 0: %s" % out)
                text, lp = out["choices"][0]["text"], out["choices"][0]["logprobs"]
            check(text == text_prompt, "echo alone gives the prompt: %r" % text)
            check(lp["top_logprobs"] is None and len(lp["token_logprobs"]) == len(lp["tokens"])
                  and all(v < 0 for v in lp["token_logprobs"][1:]), "the prompt's logprobs: %s" % lp)

        # The prefix cache: a prompt read before is not read again, and the reply is the same.
        cache_prompt = "And the evening and the morning were the first day"
        first = completion(s, cache_prompt, 5)
        again = completion(s, cache_prompt, 5)
        longer = completion(s, cache_prompt + ". And God said", 5)
        _, ref = generate(KJV, "-p", cache_prompt + ". And God said", "-n", 5)
        check(first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
              and again["usage"]["prompt_tokens_details"]["cached_tokens"] == first["usage"]["prompt_tokens"]
              and again["tokens"] == first["tokens"], "a repeated prompt comes from the cache: %s" % again["usage"])
        # The shipped model serves RecGen, which encodes a longer prompt whole.
        check(longer["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
              and longer["tokens"] == ref["tokens"], "a longer RecGen prompt is read whole: %s" % longer["usage"])
        values = s.metrics()
        check(values.get("photon_engine_prefix_hits_total", 0) >= 1
              and values.get("photon_engine_prefix_cache_bytes", 0) > 0, "prefix cache metrics")

        # Refusals name the field.
        for extra, headers, param in [
                (dict(prompt=["a", "b"]), {"X-Conversation-Id": "two-prompts"}, "prompt"),
                (dict(prompt="a", max_tokens=0), {"X-Conversation-Id": "nothing"}, "max_tokens"),
                (dict(prompt=["a", [1, 99999]]), None, "prompt[1]"),
                (dict(prompt=["a"] * 33, n=2), None, "n")]:
            status, _, out = s.post("/v1/completions", dict(dict(model=KJV, max_tokens=2), **extra), headers)
            expect_error(status, out, 400, param=param, what="%s" % extra)
        check(completion(s, "In the beginning", 2) is not None, "still serving")
    # HierGen reads only what follows a saved prompt.
    with start(KJV, "--mode", "hiergen") as s:
        first = completion(s, cache_prompt, 5)
        longer = completion(s, cache_prompt + ". And God said", 5)
        _, ref = generate(KJV, "-p", cache_prompt + ". And God said", "-n", 5, "--mode", "hiergen")
        check(longer["usage"]["prompt_tokens_details"]["cached_tokens"] == first["usage"]["prompt_tokens"]
              and longer["tokens"] == ref["tokens"], "a longer HierGen prompt reads only the rest: %s"
              % longer["usage"])
    with start(KJV, "--prefix-cache-mib", 0) as s:
        for _ in range(2):
            out = completion(s, "And the evening and the morning were the first day", 2)
            check(out["usage"]["prompt_tokens_details"]["cached_tokens"] == 0,
                  "--prefix-cache-mib 0 reads every prompt: %s" % out["usage"])


def group_errors():
    """Every bad request gets its 4xx with a message, and the server keeps serving."""
    key = "secret-key-1"
    auth = {"Authorization": "Bearer " + key}
    flags = ["--api-key", key, "--max-body-kib", 16, "--max-prompt-tokens", 64, "--max-tokens", 32,
             "--header-timeout", 1, "--body-timeout", 1]
    with start(KJV, *flags) as s:
        body = {"model": KJV, "prompt": "In the beginning", "max_tokens": 4}
        status, head, out = s.post("/v1/completions", body)
        expect_error(status, out, 401, "API key", what="no key")
        check(out["error"]["code"] == "invalid_api_key" and "bearer" in head.get("www-authenticate", "").lower(),
              "401 names the key")
        status, _, out = s.post("/v1/completions", body, {"Authorization": "Bearer wrong"})
        expect_error(status, out, 401, "invalid API key", what="wrong key")
        status, _, out = s.request("GET", "/v1/models")
        check(status == 401, "every /v1 route needs the key")
        check(s.request("GET", "/health")[0] == 200, "/health needs no key")
        check(completion(s, "In", 2, headers=auth) is not None, "the right key is served")

        def post(payload, path="/v1/completions", extra=None):
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            return s.post(path, data, dict(auth, **(extra or {})))

        status, _, out = post(b'{"model": "photon-kjv", "prompt": ')
        expect_error(status, out, 400, "not valid JSON", what="truncated JSON")
        status, _, out = post(b"[1, 2]")
        expect_error(status, out, 400, "JSON object", what="an array body")
        status, _, out = post(b"")
        expect_error(status, out, 400, "not valid JSON", what="an empty body")
        for field, value, param in [("max_tokens", "4", "max_tokens"), ("temperature", "hot", "temperature"),
                                    ("stream", 1, "stream"), ("stop", 7, "stop"), ("seed", 1.5, "seed"),
                                    ("n", 17, "n"), ("n", 0, "n"), ("best_of", 3, "best_of"),
                                    ("logprobs", 21, "logprobs"), ("echo", "yes", "echo"),
                                    ("tools", [{"type": "function"}], "tools"),
                                    ("logit_bias", {"5": 101}, "logit_bias"),
                                    ("logit_bias", {"4096": 1}, "logit_bias"),
                                    ("presence_penalty", 2.5, "presence_penalty"),
                                    ("response_format", {"type": "json_object"}, "response_format")]:
            status, _, out = post(dict(body, **{field: value}))
            expect_error(status, out, 400, field, param, what="%s=%r" % (field, value))
        status, _, out = post(dict(body, some_future_field={"x": 1}, user="u1"))
        check(status == 200, "fields that do not change the result are ignored: %s" % out)
        status, _, out = post({"model": KJV, "messages": "hello"}, "/v1/chat/completions")
        expect_error(status, out, 400, "messages", "messages", what="messages as a string")
        status, _, out = post({"model": KJV, "messages": [{"role": "user"}]}, "/v1/chat/completions")
        expect_error(status, out, 400, "content", "messages[0].content", what="a message without content")
        status, _, out = post(dict(body, model="gpt-4"))
        expect_error(status, out, 404, "gpt-4", "model", what="another model")
        status, _, out = post(dict(body, prompt="And God said " * 40))
        expect_error(status, out, 400, "at most 64", "prompt", what="a prompt over --max-prompt-tokens")
        check(out["error"]["code"] == "prompt_too_long", "code prompt_too_long")
        status, _, out = post(dict(body, max_tokens=100))
        expect_error(status, out, 400, "at most 32", "max_tokens", what="max_tokens over --max-tokens")
        status, _, out = post(dict(body, prompt=[1, 5, 4096]))
        expect_error(status, out, 400, "vocabulary", "prompt", what="a token outside the vocabulary")
        status, _, out = post(dict(body, stream_options={"include_usage": True}))
        expect_error(status, out, 400, "stream", "stream_options", what="stream_options without stream")
        status, _, out = post(body, extra={"X-Conversation-Id": "talk-1"})
        expect_error(status, out, 400, "--store", what="a conversation without a store")
        # Over the body limit: announced (Content-Length) and chunked.
        big = dict(body, prompt="x" * (20 << 10))
        status, _, out = post(big)
        expect_error(status, out, 413, "16384", what="a body over --max-body-kib")
        conn = s.connect()
        conn.putrequest("POST", "/v1/completions")
        conn.putheader("Authorization", auth["Authorization"])
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        payload = json.dumps(big).encode()
        try:
            for i in range(0, len(payload), 4096):
                piece = payload[i:i + 4096]
                conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            conn.send(b"0\r\n\r\n")
        except OSError:
            pass  # the server may answer and close before the whole body is sent
        resp = conn.getresponse()
        expect_error(resp.status, json.loads(resp.read()), 413, what="a chunked body over the limit")
        conn.close()
        # Routes and methods.
        status, _, out = s.request("GET", "/v2/anything", headers=auth)
        expect_error(status, json.loads(out), 404, what="an unknown route")
        status, _, out = s.request("GET", "/v1/completions", headers=auth)
        expect_error(status, json.loads(out), 405, "POST", what="GET on a POST route")
        status, _, out = s.request("DELETE", "/health")
        check(status == 405, "DELETE /health")
        # HTTP-level faults.
        reply = raw_exchange(s, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"y" * (20 << 10) + b"\r\n\r\n")
        check(reply.startswith(b"HTTP/1.1 431 "), "headers over 16 KiB -> 431: %r" % reply[:80])
        reply = raw_exchange(s, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        check(reply.startswith(b"HTTP/1.1 408 ") and b"timeout" in reply,
              "a body that does not arrive -> 408: %r" % reply[:120])
        reply = raw_exchange(s, b"GET /heal")
        check(reply.startswith(b"HTTP/1.1 408 "), "a request line that does not end -> 408: %r" % reply[:80])
        reply = raw_exchange(s, b"NOT HTTP AT ALL\r\n\r\n")
        check(reply.startswith(b"HTTP/1.1 400 "), "garbage -> 400: %r" % reply[:80])
        # Still serving, and the rejections were counted.
        check(s.request("GET", "/health")[0] == 200, "still healthy")
        check(completion(s, "In the beginning", 3, headers=auth) is not None, "still serving")
        values = s.metrics()
        check(values.get('photon_http_requests_total{route="other",status="431"}') == 1
              and values.get('photon_http_requests_total{route="/v1/completions",status="401"}') == 2,
              "rejections are counted")
    env = dict(os.environ, PHOTON_API_KEY="from-env")
    with Server(KJV, env=env) as s:
        check(s.post("/v1/completions", {"model": KJV, "prompt": "x"})[0] == 401
              and completion(s, "In", 2, headers={"Authorization": "Bearer from-env"}) is not None,
              "PHOTON_API_KEY")
    with start(KJV, "--store", os.path.join(WORK, "errors-store")) as s:
        status, _, out = s.post("/v1/completions", {"model": KJV, "prompt": "x", "max_tokens": 1},
                                {"X-Conversation-Id": "../../etc/passwd"})
        expect_error(status, out, 400, "X-Conversation-Id", what="an unsafe conversation id")
        check(os.listdir(os.path.join(WORK, "errors-store")) == [], "nothing written for it")
        status, _, out = s.post("/v1/completions", {"model": KJV, "prompt": "In the beginning " * 20,
                                                    "max_tokens": 250})
        expect_error(status, out, 400, "context", "max_tokens", what="prompt + max_tokens over the context")


class Holder:
    """A streamed request kept open (and its socket) until closed."""

    def __init__(self, server, body):
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        data = json.dumps(body).encode()
        self.sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
        self.received = b""

    def read_until(self, marker, seconds=30, count=1):
        """Reads until `marker` has come `count` times (events may arrive in separate HTTP chunks,
        with chunk sizes between them, or several in one)."""
        deadline = time.time() + seconds
        while self.received.count(marker) < count and time.time() < deadline:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            self.received += chunk
        return self.received.count(marker) >= count

    def close(self):
        self.sock.close()


def long_request(name):
    return {"model": name, "prompt": "In the beginning", "max_tokens": 3000, "ignore_eos": True,
            "temperature": 0.8, "seed": 1, "stream": True}


def group_busy():
    """A full queue answers 429 with Retry-After; disconnected requests leave the queue."""
    with start(SMALL, "--max-running", 1, "--max-waiting", 1) as s:
        running = Holder(s, long_request(SMALL))
        check(running.read_until(b"data: {"), "the first request streams")
        waiting = Holder(s, long_request(SMALL))
        check(s.wait_metric(lambda v: v.get("photon_engine_requests_waiting") == 1, 30) is not None,
              "the second request waits")
        check(waiting.read_until(b": ping", 30), "a waiting stream gets SSE pings")
        status, head, out = s.post("/v1/completions", dict(long_request(SMALL), stream=False))
        expect_error(status, out, 429, "busy", what="a third request")
        check(head.get("retry-after") == "1" and out["error"]["code"] == "queue_full", "429: %s" % head)
        running.close()
        waiting.close()
        check(s.wait_metric(lambda v: v.get("photon_engine_requests_running") == 0
                            and v.get("photon_engine_requests_waiting") == 0, 30) is not None,
              "closed requests leave the engine")
        check(completion(s, "In the beginning", 4) is not None, "served again")
        values = s.metrics()
        check(values.get("photon_engine_requests_refused_total") == 1
              and values.get('photon_http_requests_total{route="/v1/completions",status="429"}') == 1,
              "the refusal is counted")


def concurrent(jobs):
    """Runs each job on a thread of its own, all released together -> their results."""
    barrier = threading.Barrier(len(jobs))
    results = [None] * len(jobs)

    def run(i, job):
        barrier.wait(timeout=60)
        try:
            results[i] = job()
        except Exception as error:  # reported below as a failure of that job
            results[i] = error

    threads = [threading.Thread(target=run, args=(i, j)) for i, j in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return results


def group_equality():
    """32 concurrent greedy streams (text prompts and token-id prompts) each equal photon
    generate's run of the same prompt alone; also on a vanilla model and for chats."""
    rng = random.Random(5)
    words = ["In", " the", " beginning", " God", " created", " heaven", " and", " earth", ",", " light"]
    text_prompts = ["".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(16)]
    token_prompts = [[1] + [rng.randint(3, 4095) for _ in range(rng.randint(1, 40))] for _ in range(16)]
    lengths = [rng.randint(8, 40) for _ in range(32)]
    for name, count in [(SMALL, 32), (VANILLA, 8)]:
        refs = []
        for i in range(count):
            if i % 2 == 0:
                refs.append(generate(name, "-p", text_prompts[i // 2], "-n", lengths[i]))
            else:
                refs.append(generate(name, "--tokens", ",".join(map(str, token_prompts[i // 2])), "-n", lengths[i]))
        with start(name, "--max-running", 32) as s:
            jobs = [(lambda i=i: completion(s, text_prompts[i // 2] if i % 2 == 0 else token_prompts[i // 2],
                                            lengths[i], stream=True)) for i in range(count)]
            results = concurrent(jobs)
            for i, (out, (ref_text, ref)) in enumerate(zip(results, refs)):
                if not check(isinstance(out, dict), "%s stream %d: %r" % (name, i, out)):
                    continue
                check(out["tokens"] == ref["tokens"], "%s stream %d: tokens = generate's" % (name, i))
                check(out["text"] == ref_text, "%s stream %d: text = generate's: %r vs %r"
                      % (name, i, out["text"], ref_text))
            values = s.metrics()
            check(values.get("photon_engine_steps_total", 1e9) < sum(lengths[:count]),
                  "%s: the streams shared engine steps" % name)
    # Chats, concurrently, on the shipped model.
    questions = ["Who made the heaven?", "What is the law?", "Where is the king?", "And he said"]
    refs = [generate(KJV, "-p", render_transcript([{"role": "user", "content": q}]), "-n", 20,
                     "--stop", TRANSCRIPT_STOP) for q in questions]
    with start(KJV) as s:
        results = concurrent([(lambda q=q: chat(s, [{"role": "user", "content": q}], 20, stream=True))
                              for q in questions])
        for q, out, (ref_text, ref) in zip(questions, results, refs):
            check(isinstance(out, dict) and out["tokens"] == ref["tokens"]
                  and out["text"] == cut_at_stop(ref_text, [TRANSCRIPT_STOP]), "chat %r" % q)


def group_many():
    """256 streaming connections at once on the shipped model: 64 generate, the others wait in
    the engine's queue with their streams open (pinged); every stream ends with the text
    photon generate gives its prompt."""
    prompts = ["In the beginning", "And God said", "The LORD is my shepherd", "And it came to pass"]
    refs = [generate(KJV, "-p", p, "-n", 24, "--ignore-eos") for p in prompts]
    with start(KJV, "--max-running", 64, "--max-waiting", 256, "--quiet") as s:
        began = time.time()
        results = concurrent([(lambda i=i: completion(s, prompts[i % 4], 24, stream=True, ignore_eos=True))
                              for i in range(256)])
        took = time.time() - began
        good = sum(isinstance(out, dict) and out["tokens"] == refs[i % 4][1]["tokens"]
                   and out["text"] == refs[i % 4][0] for i, out in enumerate(results))
        print("256 concurrent streams of 24 tokens in %.1f s" % took)
        check(good == 256, "256 concurrent streams each equal generate's: %d did" % good)
        values = s.metrics()
        check(values.get("photon_engine_requests_finished_total") == 256
              and values.get("photon_engine_requests_refused_total") == 0, "all 256 ran")


class Reference:
    """One long session through photon generate: --save-session after each turn, --resume for
    the next, with the same sampling flags."""

    def __init__(self, name, tag, flags):
        self.name, self.flags = name, [str(f) for f in flags]
        self.state = os.path.join(WORK, "ref-%s.phss" % tag)
        self.turns = 0

    def turn(self, n, text=None, tokens=None, resume=True):
        argv = ["-n", n, "--save-session", self.state] + self.flags
        if resume and self.turns > 0:
            argv = ["--resume", self.state] + argv
        argv += ["-p", text] if text is not None else ["--tokens", ",".join(map(str, tokens))]
        self.turns += 1
        return generate(self.name, *argv)


def group_conversation():
    """Five turns through the store equal one long session (photon generate --save-session /
    --resume), also when the server restarts between turns; what cannot be continued is read
    whole, never an error."""
    store = os.path.join(WORK, "conversation-store")
    shutil.rmtree(store, ignore_errors=True)
    # Without the prefix cache, cached_tokens counts only what a conversation's state continued.
    flags = ["--store", store, "--prefix-cache-mib", 0]

    # Completions with text: each turn's prompt is the conversation so far and a new line.
    lines = ["In the beginning", "\nAnd the earth", "\nAnd God said", " unto Moses", "\nAnd it was so"]
    ref = Reference(SMALL, "text", [])
    conversation, server = "", start(SMALL, *flags)
    try:
        for turn, line in enumerate(lines):
            if turn == 2:  # the store outlives the server
                server.stop()
                server = start(SMALL, *flags)
            prompt = conversation + line
            out = completion(server, prompt, 12, stream=turn % 2 == 1,
                             headers={"X-Conversation-Id": "text-talk"},
                             stream_options={"include_usage": True} if turn % 2 else None)
            ref_text, expected = ref.turn(12, text=line)
            check(out["tokens"] == expected["tokens"], "text turn %d: tokens = one long session" % turn)
            check(out["text"] == ref_text, "text turn %d: text" % turn)
            cached = out["usage"]["prompt_tokens_details"]["cached_tokens"]
            check(cached > 0 if turn else cached == 0, "text turn %d: %d tokens reused" % (turn, cached))
            if turn % 2 == 0:
                check(out["headers"].get("x-conversation-version") == str(turn + 1),
                      "text turn %d: version %s" % (turn, out["headers"]))
            conversation = prompt + out["text"]
        values = server.metrics()
        # The restarted server ran turns 2 to 4, each continuing the stored state.
        counted = (values.get("photon_conversations_resumed_total"),
                   values.get("photon_conversations_saved_total"),
                   values.get("photon_engine_reused_tokens_total"))
        check(counted[:2] == (3, 3) and counted[2] > 0, "conversation metrics: %s" % (counted,))
    finally:
        server.stop()

    # Token ids: each turn's prompt is the tokens so far and new ones.
    ref = Reference(SMALL, "tokens", ["--temperature", 0.7, "--seed", 9])
    history = []
    with start(SMALL, *flags) as server:
        for turn in range(5):
            new = ([1] if turn == 0 else []) + [100 + 37 * turn + k for k in range(3)]
            out = completion(server, history + new, 10, headers={"X-Conversation-Id": "token-talk"},
                             temperature=0.7, seed=9)
            _, expected = ref.turn(10, tokens=new)
            check(out["tokens"] == expected["tokens"], "token turn %d = one long session" % turn)
            check(out["usage"]["prompt_tokens_details"]["cached_tokens"] == len(history),
                  "token turn %d reuses the %d tokens so far" % (turn, len(history)))
            history += new + out["tokens"]

    # Chat on the shipped model, sampling with a seed, restarted after the third turn: the
    # transcript template makes each turn's prompt start with the last turn's prompt and reply.
    ref = Reference(KJV, "chat", ["--temperature", 0.8, "--seed", 11, "--stop", TRANSCRIPT_STOP])
    questions = ["Who made the heaven?", "And the earth?", "What did he say?", "Where did they go?",
                 "And then?"]
    messages, before, resumed = [{"role": "system", "content": "The book of the LORD."}], None, 0
    server = start(KJV, *flags)
    try:
        for turn, q in enumerate(questions):
            if turn == 3:
                server.stop()
                server = start(KJV, *flags)
            messages.append({"role": "user", "content": q})
            prompt = render_transcript(messages)
            out = chat(server, messages, 16, stream=turn % 2 == 0,
                       headers={"X-Conversation-Id": "chat-talk"}, temperature=0.8, seed=11)
            # The store holds the last prompt and everything generated after it.
            continues = before is not None and prompt.startswith(before)
            ref_text, expected = (ref.turn(16, text=prompt[len(before):]) if continues
                                  else ref.turn(16, text=prompt, resume=False))
            check(out["tokens"] == expected["tokens"], "chat turn %d = one long session" % turn)
            cached = out["usage"]["prompt_tokens_details"]["cached_tokens"]
            check((cached > 0) == continues, "chat turn %d: reused %d, continues %s" % (turn, cached, continues))
            resumed += continues
            before = prompt + ref_text
            messages.append({"role": "assistant", "content": out["text"]})
        check(resumed >= 3, "most chat turns continued their state (%d of 4)" % resumed)
    finally:
        server.stop()

    # What cannot be continued is read whole: an edited history, a damaged file, another model.
    with start(SMALL, *flags) as server:
        first = completion(server, "In the beginning", 8, headers={"X-Conversation-Id": "edit"})
        edited = "In the end" + first["text"] + " more"
        _, whole = generate(SMALL, "-p", edited, "-n", 8)
        out = completion(server, edited, 8, headers={"X-Conversation-Id": "edit"})
        check(out["tokens"] == whole["tokens"] and out["usage"]["prompt_tokens_details"]["cached_tokens"] == 0,
              "an edited history is read whole")
        check(out["headers"].get("x-conversation-version") == "2", "and saved over the old one")
        path = os.path.join(store, "edit.conv")
        with open(path, "r+b") as f:
            f.seek(100)
            f.write(b"\xff\xff\xff\xff")
        follow = edited + out["text"] + " again"
        _, whole = generate(SMALL, "-p", follow, "-n", 8)
        out = completion(server, follow, 8, headers={"X-Conversation-Id": "edit"})
        check(out["tokens"] == whole["tokens"] and out["usage"]["prompt_tokens_details"]["cached_tokens"] == 0,
              "a damaged conversation file is read whole")
    with start(VANILLA, *flags) as server:
        # "text-talk" holds a state of photon-small.
        follow = conversation + "\nAnd"
        _, whole = generate(VANILLA, "-p", follow, "-n", 6)
        out = completion(server, follow, 6, headers={"X-Conversation-Id": "text-talk"}, model=VANILLA)
        check(out is not None and out["tokens"] == whole["tokens"]
              and out["usage"]["prompt_tokens_details"]["cached_tokens"] == 0,
              "a state of another model is read whole")
    names = sorted(os.listdir(store))
    check(names == ["chat-talk.conv", "edit.conv", "text-talk.conv", "token-talk.conv"],
          "one file per conversation, named by its id: %s" % names)


def group_disconnect():
    """A client that goes away frees its request: the metrics show it within a second."""
    with start(SMALL, "--max-running", 2) as s:
        for how in ("stream", "non-stream"):
            before = s.metrics()
            body = long_request(SMALL)
            body["stream"] = how == "stream"
            h = Holder(s, body)
            if how == "stream":
                check(h.read_until(b"data: {", count=2), "tokens stream")
            else:
                check(s.wait_metric(lambda v: v.get("photon_engine_requests_running") == 1, 10) is not None,
                      "the request runs")
                time.sleep(0.3)
            h.close()
            took = s.wait_metric(lambda v: v.get("photon_engine_requests_running") == 0
                                 and v.get("photon_engine_requests_cancelled_total", 0)
                                 == before.get("photon_engine_requests_cancelled_total", 0) + 1, 5)
            print("%s disconnect freed in %s s" % (how, took))
            check(took is not None and took <= 1.0, "%s: freed within a second (%s s)" % (how, took))
            values = s.metrics()
            check(values.get("photon_client_disconnects_total") ==
                  before.get("photon_client_disconnects_total", 0) + 1, "%s: counted" % how)
            check(values.get("photon_generations_active") == 0, "%s: nothing left" % how)
        check(completion(s, "In the beginning", 4) is not None, "still serving")


def group_shutdown():
    """SIGTERM: no new connections, running requests stop at their next token once the shutdown
    timeout passes, their conversations are saved, exit 0; the conversation then continues."""
    store = os.path.join(WORK, "shutdown-store")
    shutil.rmtree(store, ignore_errors=True)
    flags = ["--store", store, "--shutdown-timeout", 1]
    prompt = "In the beginning"
    server = start(SMALL, *flags)
    body = dict(long_request(SMALL), temperature=0)
    h = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    data = json.dumps(body).encode()
    h.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Conversation-Id: long\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    received = b""
    deadline = time.time() + 60
    while received.count(b"data: {") < 3 and time.time() < deadline:
        received += h.recv(65536)
    server.proc.send_signal(signal.SIGTERM)
    while b"data: [DONE]" not in received and time.time() < deadline:
        chunk = h.recv(65536)
        if not chunk:
            break
        received += chunk
    h.close()
    try:
        rc = server.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        rc = "killed"
    check(rc == 0, "exit 0 after SIGTERM, got %s" % rc)
    server.log.close()
    check(b"data: [DONE]" in received and b'"finish_reason":"length"' in received,
          "the running stream ended cleanly: %r" % received[-300:])
    check("stopping" in server.text(), "the log says so")
    try:
        socket.create_connection(("127.0.0.1", server.port), timeout=2).close()
        refused = False
    except OSError:
        refused = True
    check(refused, "no connections after the exit")
    # The text the client received, from the chunked stream's data lines.
    text = ""
    for line in received.split(b"\n"):
        if line.startswith(b"data: {"):
            text += json.loads(line[6:])["choices"][0]["text"]
    check(os.path.exists(os.path.join(store, "long.conv")), "the conversation was saved")
    with start(SMALL, *flags) as s:
        follow = prompt + text + "\nAnd"
        out = completion(s, follow, 8, headers={"X-Conversation-Id": "long"})
        cached = out["usage"]["prompt_tokens_details"]["cached_tokens"]
    # The saved session holds the prompt and the n tokens streamed: greedy, the first n tokens
    # photon generate gives; it continues as that session resumed with the rest of the text.
    _, alone = generate(SMALL, "-p", prompt, "-n", 0)
    n = cached - alone["prompt_tokens"]
    check(n > 0, "the saved session holds the streamed tokens (%d)" % n)
    state = os.path.join(WORK, "shutdown.phss")
    generate(SMALL, "-p", prompt, "-n", n, "--ignore-eos", "--save-session", state)
    check(text.startswith(generate(SMALL, "-p", prompt, "-n", n, "--ignore-eos")[0]),
          "the stream was generate's greedy text")
    _, expected = generate(SMALL, "--resume", state, "-p", follow[len(prompt) + len(text):], "-n", 8)
    check(out["tokens"] == expected["tokens"], "the stopped conversation continues as one session")


def soak(seconds, seed=1):
    """Mixed load with random disconnects for `seconds`: no request that should succeed fails,
    and the server's resident memory and descriptors end where they started."""
    store = os.path.join(WORK, "soak-store")
    shutil.rmtree(store, ignore_errors=True)
    with open(PHOTON, "rb") as f:
        binary = f.read()
    # Under the sanitizers resident memory says nothing: ThreadSanitizer's grows with the history it
    # keeps, and AddressSanitizer's allocator keeps what was freed in its own pools. There,
    # LeakSanitizer checks the server's memory when it exits (a leak fails the exit status).
    measure_memory = b"ThreadSanitizer" not in binary and b"AddressSanitizer" not in binary
    with start(KJV, "--store", store, "--max-running", 8, "--max-waiting", 512, "--quiet",
               "--prefix-cache-mib", 16) as s:
        pid = s.proc.pid
        counts = {"ok": 0, "expected-4xx": 0, "disconnected": 0, "failed": 0}
        failures = []

        def resident():
            with open("/proc/%d/status" % pid) as f:
                return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) * 1024

        def descriptors():
            return len(os.listdir("/proc/%d/fd" % pid))

        def quiet():
            """Waits until nothing runs and every connection but the asking one has closed, then
            for that one to close too (the server closes it when the client does)."""
            ok = s.wait_metric(lambda v: v.get("photon_generations_active") == 0
                               and v.get("photon_http_connections_open") == 1, 30) is not None
            time.sleep(0.5)
            return ok

        def one(rng, conversations):
            kind = rng.random()
            chat_request = rng.random() < 0.4
            stream = rng.random() < 0.6
            n = rng.randint(1, 48)
            headers = {}
            if kind < 0.1:  # a bad request: must get its 4xx
                body = rng.choice([b"{", b'{"model": "photon-kjv", "prompt": 5}',
                                   json.dumps({"model": "other", "prompt": "x"}).encode(),
                                   json.dumps({"model": KJV, "prompt": "x", "n": 99}).encode()])
                status, _, _ = s.request("POST", "/v1/completions", body)
                return "expected-4xx" if 400 <= status < 500 else "failed:%d" % status
            body = {"model": KJV, "max_tokens": n, "temperature": rng.choice([0, 0.7, 1.0]),
                    "seed": rng.randint(0, 1000), "stream": stream}
            path = "/v1/chat/completions" if chat_request else "/v1/completions"
            if chat_request:
                body["messages"] = [{"role": "user", "content": rng.choice(["Who?", "What is it?", "And he said"])}]
            else:
                body["prompt"] = rng.choice(["In the beginning", "And God said", "The LORD is"])
            if rng.random() < 0.2 and not chat_request:
                cid = "soak-%d" % rng.randint(0, 7)
                headers["X-Conversation-Id"] = cid
                body["prompt"] = conversations.get(cid, "In the beginning")[-400:]
            if rng.random() < 0.2:  # go away mid-reply
                h = Holder(s, dict(body, stream=True)) if not chat_request else None
                if h is None:
                    h = socket.create_connection(("127.0.0.1", s.port), timeout=30)
                    data = json.dumps(dict(body, stream=True)).encode()
                    h.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                              % (path.encode(), len(data), data))
                    h.recv(rng.randint(1, 2000))
                    h.close()
                else:
                    h.read_until(b"data: {", 10)
                    h.close()
                return "disconnected"
            if stream:
                status, _, events, _ = s.stream(path, body, headers)
                ok = status == 200 and events and events[-1] == "[DONE]" and not any(
                    isinstance(e, dict) and "error" in e for e in events)
                text = "".join(e["choices"][0].get("text", "") for e in events
                               if isinstance(e, dict) and e.get("choices"))
            else:
                status, _, out = s.post(path, body, headers)
                ok = status == 200 and out["choices"][0]["finish_reason"] in ("stop", "length")
                text = out["choices"][0].get("text", "") if ok else ""
            if ok and "X-Conversation-Id" in headers:
                conversations[headers["X-Conversation-Id"]] = body["prompt"] + text + " and"
            return "ok" if ok else "failed:%d" % status

        def client(index, until):
            rng = random.Random(seed * 1000 + index)
            conversations = {}
            while time.time() < until:
                try:
                    result = one(rng, conversations)
                except Exception as error:
                    result = "failed:%r" % error
                with LOCK:
                    key = result if result in counts else "failed"
                    counts[key] += 1
                    if key == "failed":
                        failures.append(result)

        def run(duration, clients=12):
            until = time.time() + duration
            threads = [threading.Thread(target=client, args=(i, until)) for i in range(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=duration + 120)

        run(min(15, seconds / 4))  # warm up: allocator pools, thread stacks, the store
        check(quiet(), "quiet after the warm-up")
        rss0, fds0 = resident(), descriptors()
        samples = []
        start_time = time.time()
        while time.time() - start_time < seconds:
            run(min(30, seconds - (time.time() - start_time)))
            check(quiet(), "quiet between rounds")
            samples.append((round(time.time() - start_time), resident(), descriptors()))
        rss1, fds1 = resident(), descriptors()
        values = s.metrics()
        print("soak: %d s, %s; RSS %.1f -> %.1f MiB, descriptors %d -> %d; samples %s"
              % (seconds, counts, rss0 / 2**20, rss1 / 2**20, fds0, fds1,
                 [(t, round(r / 2**20, 1), d) for t, r, d in samples]))
        check(counts["failed"] == 0, "no request that should succeed failed: %s" % failures[:10])
        check(counts["ok"] > 50 and counts["disconnected"] > 5, "the soak did work: %s" % counts)
        check(fds1 == fds0, "descriptors flat: %d -> %d" % (fds0, fds1))
        # Flat but for the prefix cache, which fills up to its cap and stays there.
        cache = values.get("photon_engine_prefix_cache_bytes", 0)
        check(cache <= 16 << 20, "the prefix cache within --prefix-cache-mib: %d" % cache)
        check(not measure_memory or rss1 <= rss0 + max(8 << 20, rss0 // 10) + (16 << 20),
              "resident memory flat: %d -> %d" % (rss0, rss1))
        check(values.get("photon_engine_requests_running") == 0 and values.get("photon_engine_requests_waiting") == 0
              and values.get("photon_engine_memory_bytes") == 0, "the engine is empty")
        return counts, rss0, rss1, fds0, fds1


def group_soak():
    soak(int(os.environ.get("PHOTON_SOAK_SECONDS", "60")))


def group_node_setup():
    """Installs the official openai client (5.x) from the npm registry into the build tree."""
    os.makedirs(NODE_DIR, exist_ok=True)
    if os.path.exists(os.path.join(NODE_DIR, "node_modules", "openai", "package.json")):
        check(True, "openai is installed")
        return
    proc = subprocess.run([NPM, "install", "--prefix", NODE_DIR, "--no-audit", "--no-fund",
                           "--loglevel=error", "openai@^5"], capture_output=True, timeout=540)
    check(proc.returncode == 0, "npm install openai@^5: %s" % proc.stderr.decode()[-2000:])


def group_openai_node():
    """The official openai client for Node streams and non-streams both endpoints."""
    script = os.path.join(NODE_DIR, "openai_client.mjs")
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), "openai_client.mjs"), script)
    with open(os.path.join(NODE_DIR, "node_modules", "openai", "package.json")) as f:
        version = json.load(f)["version"]
    check(version.startswith("5."), "openai 5.x: %s" % version)
    prompt = "In the beginning"
    messages = [{"role": "user", "content": "Who made the heaven?"}]
    with start(KJV, "--api-key", "node-key") as s:
        proc = subprocess.run([NODE, script, "http://127.0.0.1:%d/v1" % s.port, "node-key", KJV, prompt,
                               json.dumps(messages)], capture_output=True, timeout=120, cwd=NODE_DIR)
        if not check(proc.returncode == 0, "the node client: %s" % proc.stderr.decode()[-3000:]):
            return
        got = json.loads(proc.stdout)
    ref_text, ref = generate(KJV, "-p", prompt, "-n", 16)
    chat_text, chat_ref = generate(KJV, "-p", render_transcript(messages), "-n", 16, "--stop", TRANSCRIPT_STOP)
    chat_text = cut_at_stop(chat_text, [TRANSCRIPT_STOP])
    check(got["models"] == [KJV], "models.list: %s" % got["models"])
    check(got["completion"]["text"] == ref_text, "completions.create: %r vs %r" % (got["completion"]["text"], ref_text))
    check(got["completion"]["usage"]["completion_tokens"] == len(ref["tokens"]), "completion usage")
    check(got["completion_stream"]["text"] == ref_text, "completions.create stream")
    check(got["chat"]["text"] == chat_text, "chat.completions.create: %r vs %r" % (got["chat"]["text"], chat_text))
    check(got["chat_stream"]["text"] == chat_text and got["chat_stream"]["role"] == "assistant"
          and got["chat_stream"]["finish_reason"] in ("stop", "length")
          and got["chat_stream"]["usage"]["completion_tokens"] == len(chat_ref["tokens"]),
          "chat.completions.create stream: %s" % got["chat_stream"])
    rendered = render_transcript(messages)
    choices = [cut_at_stop(generate(KJV, "-p", rendered, "-n", 8, "--temperature", 0.9, "--seed", 11 + i,
                                    "--stop", TRANSCRIPT_STOP)[0], [TRANSCRIPT_STOP]) for i in range(2)]
    check(got["chat_choices"] == [{"index": i, "text": choices[i]} for i in range(2)],
          "chat.completions.create n=2: %s vs %s" % (got["chat_choices"], choices))
    echoed = got["echoed"]
    for i, text in enumerate([prompt, prompt + " God"]):
        one = generate(KJV, "-p", text, "-n", 1)[0]
        check(len(echoed) == 2 and echoed[i]["index"] == i and echoed[i]["text"] == text + one
              and echoed[i]["logprobs"][0] is None and echoed[i]["top"][0] is None
              and len(echoed[i]["tokens"]) == len(echoed[i]["top"]) >= 3
              and all(v <= max(t.values()) for v, t in zip(echoed[i]["logprobs"][1:], echoed[i]["top"][1:])),
              "completions.create with echo, two prompts: %s" % echoed[i:i + 1])
    penalized_text, _ = generate(KJV, "-p", prompt, "-n", 16, "--temperature", 0.8, "--seed", 3,
                                 "--presence-penalty", 0.7, "--frequency-penalty", 0.4,
                                 "--logit-bias", "5=2.5")
    check(got["penalized"]["text"] == penalized_text,
          "completions.create with penalties and logit_bias: %r vs %r" % (got["penalized"]["text"], penalized_text))
    _, alt = generate(KJV, "-p", render_transcript(messages), "-n", 4, "--top-logprobs", 2,
                      "--stop", TRANSCRIPT_STOP)
    check(len(got["alternatives"]) == len(alt["top_logprobs"]) and all(
        abs(g["logprob"] - lp) < 1e-5 and len(g["top"]) == 2
        and all(abs(a - r[1]) < 1e-5 for a, r in zip(g["top"], ref_top))
        for g, lp, ref_top in zip(got["alternatives"], alt["logprobs"], alt["top_logprobs"])),
        "chat.completions.create with top_logprobs: %s vs %s" % (got["alternatives"], alt))
    check(got["errors"] == {"bad_key": ["AuthenticationError", 401], "bad_model": ["NotFoundError", 404],
                            "bad_n": ["BadRequestError", 400]}, "errors as the client's classes: %s" % got["errors"])


GROUPS = {
    "setup": group_setup, "usage": group_usage, "api": group_api, "errors": group_errors,
    "busy": group_busy, "choices": group_choices, "prompts": group_prompts, "many": group_many, "equality": group_equality, "conversation": group_conversation,
    "disconnect": group_disconnect, "shutdown": group_shutdown, "soak": group_soak,
    "node_setup": group_node_setup, "openai_node": group_openai_node,
}


def main():
    global PHOTON, WORK, SOURCE, WRITE_TEMPLATE_MODEL, NODE_DIR, NPM, NODE, DEVICE
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--photon", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--write-template-model", default="")
    parser.add_argument("--node-dir", default="")
    parser.add_argument("--npm", default="npm")
    parser.add_argument("--node", default="node")
    parser.add_argument("--device", default="",
                        help="the servers' and photon generate's --device (default: the CPU)")
    parser.add_argument("group", choices=sorted(GROUPS))
    args = parser.parse_args()
    PHOTON, WORK, SOURCE = (os.path.abspath(p) for p in (args.photon, args.work_dir, args.source_dir))
    WRITE_TEMPLATE_MODEL, NODE_DIR = args.write_template_model, os.path.abspath(args.node_dir or WORK)
    NPM, NODE = args.npm, args.node
    DEVICE = ["--device", args.device] if args.device else []
    os.makedirs(WORK, exist_ok=True)
    try:
        GROUPS[args.group]()
    except Exception as error:  # a crash of the test itself counts as a failure
        check(False, "%s: %r" % (args.group, error))
        raise
    finally:
        print("%d passed, %d failed" % (PASSED, FAILED))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
