#!/usr/bin/env python3
# Usage: bench/planner/exact_random_instances.py FIRST_SEED END_SEED OUT_DIR
# Random instances shaped like the MiniMalloc challenging suite: a 2^20 x 2^20 time-by-address
# square cut by random guillotine cuts (multiples of 1024) into rectangles = buffers, then some
# removed (fill 60-98 %). Feasible at capacity 2^20 by construction.
import random, sys
def gen(seed, n_target, fill):
    rng = random.Random(seed)
    U = 1024
    rects = [(0, 1024, 0, 1024)]  # t0, t1, a0, a1 in units of 1024
    while len(rects) < n_target:
        # split a random big rectangle
        rects.sort(key=lambda r: (r[1]-r[0])*(r[3]-r[2]))
        i = rng.randrange(len(rects)//2, len(rects))
        t0, t1, a0, a1 = rects.pop(i)
        if (rng.random() < 0.5 and t1 - t0 > 1) or a1 - a0 <= 1:
            if t1 - t0 <= 1: rects.append((t0,t1,a0,a1)); continue
            c = rng.randrange(t0 + 1, t1)
            rects += [(t0, c, a0, a1), (c, t1, a0, a1)]
        else:
            c = rng.randrange(a0 + 1, a1)
            rects += [(t0, t1, a0, c), (t0, t1, c, a1)]
    rng.shuffle(rects)
    total = 1024 * 1024
    area = sum((r[1]-r[0])*(r[3]-r[2]) for r in rects)
    keep = []
    # remove random rectangles until fill reached (keep at least one spanning the peak)
    for r in rects:
        if area / total > fill and rng.random() < 0.5:
            area -= (r[1]-r[0])*(r[3]-r[2]); continue
        keep.append(r)
    out = ["id,lower,upper,size"]
    for k, (t0, t1, a0, a1) in enumerate(keep):
        out.append(f"{k},{t0*U},{t1*U},{(a1-a0)*U}")
    return "\n".join(out) + "\n"
for seed in range(int(sys.argv[1]), int(sys.argv[2])):
    rng = random.Random(seed * 7)
    n = rng.randrange(150, 460); fill = rng.uniform(0.6, 0.98)
    open(f"{sys.argv[3]}/R{seed}.csv", "w").write(gen(seed, n, fill))
