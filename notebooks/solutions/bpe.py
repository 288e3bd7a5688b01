"""Reference answers to the exercises of notebook 01 (byte-level BPE): one merge step of training, and
encoding bytes with a list of merges. Pure Python; each function stands alone, so `%load -s` shows all of it."""


def merge_step(ids: list[int], new_id: int) -> tuple[tuple[int, int], list[int]]:
    counts = {}
    for pair in zip(ids, ids[1:]):  # every position: [5, 5, 5] holds (5, 5) twice
        counts[pair] = counts.get(pair, 0) + 1
    pair = min(counts, key=lambda p: (-counts[p], p))  # the most frequent; on a tie, the smallest pair
    new_ids, i = [], 0
    while i < len(ids):  # left to right, without overlaps
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            new_ids.append(new_id)
            i += 2
        else:
            new_ids.append(ids[i])
            i += 1
    return pair, new_ids


def encode_with_merges(data: bytes, merges: list[tuple[int, int]]) -> list[int]:
    rank = {pair: 256 + i for i, pair in enumerate(merges)}  # merge i makes id 256 + i
    ids = list(data)
    while len(ids) >= 2:
        pair = min(zip(ids, ids[1:]), key=lambda p: rank.get(p, float("inf")))  # the earliest merge present
        if pair not in rank:
            break  # no adjacent pair is a merge: done
        merged, i = [], 0
        while i < len(ids):  # every occurrence, left to right, without overlaps
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                merged.append(rank[pair])
                i += 2
            else:
                merged.append(ids[i])
                i += 1
        ids = merged
    return ids
