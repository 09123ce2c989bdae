"""The training corpus: the King James Bible from Debian, split by chapter, and its tokenizer.

Text: the King James Version (1611) as shipped by Debian's bible-kjv-text package, read with the
`bible` program of package bible-kjv. Public domain (the package's copyright file: "The copyright
for the King James Version text of the Bible is expired"; in the United Kingdom the Crown still
holds printing rights by letters patent). Nothing of it is stored in the repository.

Splits, over the 1,189 chapters in canonical order (chapter index k = 0 .. 1188):
  validation  k % 40 == 19        test  k % 40 == 39        train  every other chapter
A chapter is one document: its verses joined by single spaces. Verses of validation or test whose
exact text also occurs in an earlier split (train, then validation) are dropped, so no verse text
is in two splits (the KJV repeats formulas such as "And the LORD spake unto Moses, saying,").

Outputs in the output directory:
  train.txt valid.txt test.txt   one chapter a line (the documents)
  tokenizer.model                sentencepiece, trained on the train split only (spm_train)
  train.npy valid.npy test.npy   the token stream (uint16): each chapter's tokens, then a newline
  test-segments.txt              the test split cut at verse boundaries into segments of at most
                                 `segment_tokens` tokens with BOS (what `photon score` evaluates)
  corpus.json                    counts, settings and sha256 of every file
"""

import hashlib
import json
import pathlib
import re
import shutil
import subprocess
import tempfile

import numpy as np

BIBLE_DATA_DIR = "/usr/lib"  # bible-kjv-text installs bible.data there
WHOLE_BIBLE = "Gen1:1-Rev22:21"
# `bible -f` prints one verse per line: "<book><chapter>:<verse> <text>", e.g. "1Sm3:4 That ...".
VERSE_LINE = re.compile(r"^([1-3]?[A-Za-z]+[0-9]+):([0-9]+) (.*)$")
KJV_VERSES, KJV_CHAPTERS = 31102, 1189
SPLIT_PERIOD, VALID_PHASE, TEST_PHASE = 40, 19, 39

# The settings of scripts/make-tokenizer (the SDK's built-in tokenizer), on the train split only.
TOKENIZER_SETTINGS = {
    "model_type": "unigram",
    "vocab_size": "4096",
    "byte_fallback": "true",
    "character_coverage": "1.0",
    "normalization_rule_name": "identity",
    "remove_extra_whitespaces": "false",
    "split_digits": "true",
    "unk_id": "0",
    "bos_id": "1",
    "eos_id": "2",
    "pad_id": "-1",
    "input_sentence_size": "0",
    "num_threads": "1",
    "random_seed": "20240101",
}
BOS = 1
NEWLINE_PIECE = "<0x0A>"  # the byte piece that ends every chapter in the token stream


def tool(name, package):
    path = shutil.which(name)
    if path is None:
        raise SystemExit(f"make-corpus: `{name}` not found (apt-get install {package})")
    return path


def read_chapters():
    """[(chapter reference, [verse texts])] of the whole KJV in canonical order."""
    bible = tool("bible", "bible-kjv bible-kjv-text")
    # -f turns pretty-printing off: one verse per line, prefixed by its reference.
    dump = subprocess.run([bible, "-f", "-p", BIBLE_DATA_DIR, WHOLE_BIBLE], check=True,
                          capture_output=True, text=True, encoding="ascii").stdout
    chapters = []
    for line in dump.splitlines():
        match = VERSE_LINE.match(line)
        if match is None:
            raise SystemExit(f"make-corpus: unexpected line from bible: {line!r}")
        reference, verse = match.group(1), int(match.group(2))
        text = " ".join(match.group(3).split())
        if verse == 1:
            chapters.append((reference, []))
        elif not chapters or chapters[-1][0] != reference:
            raise SystemExit(f"make-corpus: verse {line!r} does not continue a chapter")
        chapters[-1][1].append(text)
    verses = sum(len(v) for _, v in chapters)
    if verses != KJV_VERSES or len(chapters) != KJV_CHAPTERS:
        raise SystemExit(f"make-corpus: expected {KJV_VERSES} verses in {KJV_CHAPTERS} chapters, "
                         f"bible printed {verses} in {len(chapters)}")
    return chapters


def split_chapters(chapters):
    """{"train", "valid", "test"}: [(reference, verses)], disjoint in chapters and verse texts."""
    splits = {"train": [], "valid": [], "test": []}
    for k, chapter in enumerate(chapters):
        phase = k % SPLIT_PERIOD
        name = "valid" if phase == VALID_PHASE else "test" if phase == TEST_PHASE else "train"
        splits[name].append(chapter)
    seen = {verse for _, verses in splits["train"] for verse in verses}
    dropped = {}
    for name in ("valid", "test"):
        kept = []
        dropped[name] = 0
        for reference, verses in splits[name]:
            unique = [v for v in verses if v not in seen]
            dropped[name] += len(verses) - len(unique)
            seen.update(unique)
            if unique:
                kept.append((reference, unique))
        splits[name] = kept
    return splits, dropped


def train_tokenizer(train_verses, out_path):
    spm_train = tool("spm_train", "sentencepiece")
    with tempfile.TemporaryDirectory(prefix="photon-corpus-") as tmp:
        # One verse a line, relative names only: the trainer stores them in the model.
        (pathlib.Path(tmp) / "train.txt").write_text("\n".join(train_verses) + "\n",
                                                      encoding="ascii")
        args = [spm_train, "--input=train.txt", "--model_prefix=tokenizer"]
        args += [f"--{key}={value}" for key, value in TOKENIZER_SETTINGS.items()]
        subprocess.run(args, cwd=tmp, check=True, capture_output=True)
        shutil.copyfile(pathlib.Path(tmp) / "tokenizer.model", out_path)


def encode_lines(model_path, lines):
    """spm_encode ids of each line (the library the SDK tokenizes with), without BOS."""
    spm_encode = tool("spm_encode", "sentencepiece")
    out = subprocess.run([spm_encode, f"--model={model_path}", "--output_format=id"],
                         input="\n".join(lines) + "\n", check=True, capture_output=True,
                         text=True, encoding="ascii").stdout.splitlines()
    if len(out) != len(lines):
        raise SystemExit(f"make-corpus: spm_encode gave {len(out)} lines for {len(lines)}")
    return [[int(t) for t in line.split()] for line in out]


def piece_id(model_path, piece):
    spm_export_vocab = tool("spm_export_vocab", "sentencepiece")
    vocab = subprocess.run([spm_export_vocab, f"--model={model_path}"], check=True,
                           capture_output=True, text=True).stdout.splitlines()
    for index, line in enumerate(vocab):
        if line.split("\t")[0] == piece:
            return index
    raise SystemExit(f"make-corpus: {model_path} has no piece {piece}")


def segments(model_path, chapters, max_tokens):
    """Consecutive verses of one chapter joined by spaces, packed greedily so that each segment
    with BOS has at most max_tokens tokens."""
    out = []
    for _, verses in chapters:
        lengths = [len(ids) for ids in encode_lines(model_path, verses)]
        current, current_tokens = [], 1  # BOS
        for verse, n in zip(verses, lengths):
            if current and current_tokens + n > max_tokens:
                out.append(" ".join(current))
                current, current_tokens = [], 1
            current.append(verse)
            current_tokens += n
        out.append(" ".join(current))
    # Joining verses with spaces tokenizes as the verses one after another; check it exactly.
    for text, ids in zip(out, encode_lines(model_path, out)):
        if 1 + len(ids) > max_tokens:
            raise SystemExit(f"make-corpus: a test segment has {1 + len(ids)} tokens "
                             f"(> {max_tokens}): {text[:60]!r}")
    return out


def sha256(path):
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def make_corpus(out_dir, segment_tokens=256):
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    splits, dropped = split_chapters(read_chapters())
    tokenizer = out_dir / "tokenizer.model"
    train_tokenizer([v for _, verses in splits["train"] for v in verses], tokenizer)
    newline = piece_id(tokenizer, NEWLINE_PIECE)
    stats = {"source": "Debian bible-kjv-text (King James Version, public domain), read with "
                       "`bible -f` of bible-kjv",
             "split_rule": f"chapter index k: k % {SPLIT_PERIOD} == {VALID_PHASE} valid, "
                           f"== {TEST_PHASE} test, else train; valid/test verses whose text is in "
                           "an earlier split are dropped",
             "tokenizer": {**TOKENIZER_SETTINGS, "trained_on": "train.txt verses"},
             "segment_tokens": segment_tokens, "splits": {}}
    for name, chapters in splits.items():
        documents = [" ".join(verses) for _, verses in chapters]
        (out_dir / f"{name}.txt").write_text("\n".join(documents) + "\n", encoding="ascii")
        stream = []
        for ids in encode_lines(tokenizer, documents):
            stream += ids + [newline]
        np.save(out_dir / f"{name}.npy", np.asarray(stream, dtype=np.uint16))
        stats["splits"][name] = {
            "chapters": len(chapters), "verses": sum(len(v) for _, v in chapters),
            "words": sum(len(d.split()) for d in documents), "tokens": len(stream),
            "dropped_duplicate_verses": dropped.get(name, 0),
            "first_chapters": [ref for ref, _ in chapters[:3]]}
    test_segments = segments(tokenizer, splits["test"], segment_tokens)
    (out_dir / "test-segments.txt").write_text("\n".join(test_segments) + "\n", encoding="ascii")
    stats["splits"]["test"]["segments"] = len(test_segments)
    stats["sha256"] = {p.name: sha256(p) for p in sorted(out_dir.iterdir())
                       if p.suffix in (".txt", ".npy", ".model")}
    (out_dir / "corpus.json").write_text(json.dumps(stats, indent=1) + "\n")
    return stats
