"""Reference answer to the exercise of notebook 02 (token shards): reading one document out of a shard."""


def read_document(tokens, ends, i: int):
    start = 0 if i == 0 else int(ends[i - 1])  # document 0 starts the shard; document i where i - 1 ended
    return tokens[start : int(ends[i])]  # the end is exclusive: <|bos|> ... <|eos|>
