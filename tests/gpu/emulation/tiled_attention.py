#!/usr/bin/env python3
"""Host emulation of attention_tiled_kernel (src/backend/cuda/attention_tiled.cu), for machines
without a GPU: the kernel's loops transcribed line by line (blocks, warps of 32 lanes with two keys each, the
padded shared-memory layout, the key-tile loop with its causal masks and online softmax, the warps'
weights through shared memory, read four keys at a time), run on random segments and compared with causal attention in float64, with the
rows that no tile covers checked untouched (NaN). It checks the indexing and the arithmetic, not
the CUDA code itself: keep it in step with the kernel.

usage: /usr/bin/python3 tests/gpu/emulation/tiled_attention.py   (numpy; seconds)
"""
import sys

import numpy as np
TILE_ROWS, WARPS, KEYS_PER_LANE = 32, 4, 2
TILE_KEYS = 32 * KEYS_PER_LANE
ROWS_PER_WARP = TILE_ROWS // WARPS

def padded_stride(head_dim):
    return (head_dim + 31) // 32 * 32 + 4

def kernel(q, heads, kv_heads, head_dim, segs, tiles, out, kdims):
    for bx, (si, first) in enumerate(tiles):
        row0, nrows, start, K, V = segs[si]
        for head in range(heads):
            stride = padded_stride(head_dim)
            qs = np.full(TILE_ROWS * stride, np.nan, np.float32)
            ks = np.full(TILE_KEYS * stride, np.nan, np.float32)
            vs = np.full(TILE_KEYS * head_dim, np.nan, np.float32)
            ps = np.full(TILE_ROWS * TILE_KEYS, np.nan, np.float32)
            rows = min(TILE_ROWS, nrows - first)
            kv_dim = kv_heads * head_dim
            kv_off = (head // (heads // kv_heads)) * head_dim
            first_row = row0 + first
            first_pos = start + first
            keys = first_pos + rows
            for e in range(TILE_ROWS * head_dim):
                r, d = divmod(e, head_dim)
                qs[r * stride + d] = q[((first_row + r) * heads + head) * head_dim + d] if r < rows else 0.0
            scale = np.float32(1.0) / np.sqrt(np.float32(head_dim))
            rmax = np.full((WARPS, ROWS_PER_WARP), -np.inf, np.float32)
            ssum = np.zeros((WARPS, ROWS_PER_WARP), np.float32)
            acc = np.zeros((WARPS, ROWS_PER_WARP, kdims, 32), np.float32)
            base = 0
            while base < keys:
                count = min(TILE_KEYS, keys - base)
                for e in range(TILE_KEYS * head_dim):
                    j, d = divmod(e, head_dim)
                    kk = vv = 0.0
                    if j < count:
                        at = (base + j) * kv_dim + d + kv_off
                        kk, vv = K[at], V[at]
                    ks[j * stride + d] = kk
                    vs[j * head_dim + d] = vv
                for w in range(WARPS):
                    p = np.zeros((ROWS_PER_WARP, TILE_KEYS), np.float32)  # [r, lane + 32 c]
                    for lane in range(32):
                        for c in range(KEYS_PER_LANE):
                            kr = (lane + 32 * c) * stride
                            for d in range(0, head_dim, 4):
                                kk = ks[kr + d: kr + d + 4]
                                for r in range(ROWS_PER_WARP):
                                    qr = (w * ROWS_PER_WARP + r) * stride + d
                                    p[r, lane + 32 * c] += np.float32(np.dot(qs[qr:qr + 4], kk))
                    warp_p = (w * ROWS_PER_WARP) * TILE_KEYS
                    for r in range(ROWS_PER_WARP):
                        last = first_pos + w * ROWS_PER_WARP + r
                        j = np.arange(TILE_KEYS)
                        valid = (j < count) & (base + j <= last)
                        score = np.where(valid, p[r] * scale, -np.inf).astype(np.float32)
                        new_max = max(rmax[w, r], score.max())
                        assert np.isfinite(new_max)
                        pr = np.where(valid, np.exp(score - new_max), 0.0).astype(np.float32)
                        rescale = np.float32(np.exp(rmax[w, r] - new_max))
                        ssum[w, r] = ssum[w, r] * rescale + pr.sum()
                        acc[w, r] *= rescale
                        rmax[w, r] = new_max
                        ps[warp_p + r * TILE_KEYS: warp_p + (r + 1) * TILE_KEYS] = pr
                    for j in range(0, count, 4):
                        for i in range(kdims):
                            for lane in range(32):
                                d = lane + 32 * i
                                for t in range(4):
                                    val = vs[(j + t) * head_dim + d] if d < head_dim else 0.0
                                    for r in range(ROWS_PER_WARP):
                                        weight = ps[warp_p + r * TILE_KEYS + j + t]
                                        acc[w, r, i, lane] += weight * val
                base += TILE_KEYS
            for w in range(WARPS):
                for r in range(ROWS_PER_WARP):
                    row = w * ROWS_PER_WARP + r
                    if row >= rows: continue
                    for i in range(kdims):
                        for lane in range(32):
                            d = lane + 32 * i
                            if d < head_dim:
                                out[((first_row + row) * heads + head) * head_dim + d] = acc[w, r, i, lane] / ssum[w, r]

def reference(q, heads, kv_heads, head_dim, seg, row):
    row0, nrows, start, K, V = seg
    i = row - row0
    out = np.zeros(heads * head_dim)
    kv_dim = kv_heads * head_dim
    for h in range(heads):
        kvh = h // (heads // kv_heads)
        qh = q[(row * heads + h) * head_dim:(row * heads + h + 1) * head_dim].astype(np.float64)
        n = start + i + 1
        Km = K.reshape(-1, kv_dim)[:n, kvh * head_dim:(kvh + 1) * head_dim].astype(np.float64)
        Vm = V.reshape(-1, kv_dim)[:n, kvh * head_dim:(kvh + 1) * head_dim].astype(np.float64)
        s = Km @ qh / np.sqrt(head_dim)
        s = np.exp(s - s.max()); s /= s.sum()
        out[h * head_dim:(h + 1) * head_dim] = s @ Vm
    return out

rng = np.random.default_rng(1)
for heads, kv_heads, head_dim, specs in [(4, 2, 8, [(40, 0), (3, 2), (45, 37)]),
                                         (2, 1, 36, [(33, 5), (16, 16)]),
                                         (2, 2, 52, [(40, 101), (19, 0)])]:
    kdims = 1 if head_dim <= 32 else 2 if head_dim <= 64 else 4
    kv_dim = kv_heads * head_dim
    segs, tiles, longs = [], [], []
    row = 0
    for rows, start in specs:
        K = rng.uniform(-2, 2, (start + rows + 3) * kv_dim).astype(np.float32)
        V = rng.uniform(-1, 1, (start + rows + 3) * kv_dim).astype(np.float32)
        segs.append((row, rows, start, K, V)); row += rows
    n = row
    q = rng.uniform(-2, 2, n * heads * head_dim).astype(np.float32)
    out = np.full(n * heads * head_dim, np.nan, np.float32)
    for s in segs:
        if s[1] >= 16:
            for first in range(0, s[1], TILE_ROWS): tiles.append((len(longs), first))
            longs.append(s)
    kernel(q, heads, kv_heads, head_dim, longs, tiles, out, kdims)
    worst = 0
    for s in longs:
        for r in range(s[0], s[0] + s[1]):
            ref = reference(q, heads, kv_heads, head_dim, s, r)
            got = out[r * heads * head_dim:(r + 1) * heads * head_dim]
            assert np.all(np.isfinite(got)), (r,)
            worst = max(worst, np.abs(got - ref).max() / max(1e-9, np.abs(ref).max()))
    short_rows = [r for s in segs if s[1] < 16 for r in range(s[0], s[0] + s[1])]
    untouched = all(np.all(np.isnan(out[r * heads * head_dim:(r + 1) * heads * head_dim])) for r in short_rows)
    print(f"heads {heads}/{kv_heads} head_dim {head_dim}: {len(tiles)} tiles, worst relative "
          f"error {worst:.2e}, short rows untouched: {untouched}")
    if worst > 1e-5 or not untouched:
        sys.exit(1)
