"""What the tests hold train_gpt.py to: the records' code restated from a description of it
(docs/frontier.md and docs/evaluation.md state the facts), in plain loops and tensor operations,
apart from the script's own implementations. Two borrow from it what they do not specify:
upstream_loaders reads shards with its shard reader, and upstream_ttt runs its GPT (the
evaluation around the model is what it states).

  upstream_eval      the April and May records' plain and sliding-window evaluation
  upstream_frontier  PR #1855's network, initialisation, Muon, AdamW, EMA and schedule
  upstream_loaders   the April records' docpack and shuffled loaders, synchronous
  upstream_ngram     PR #2135's token n-gram tilt, one position at a time
  upstream_quant     the records' GPTQ, LQER, AWQ-lite, artifact layouts and code bytes
  upstream_runs      the three leaderboard runs' settings, as data
  upstream_ttt       the records' phased, score-first test-time training

The benchmarks in benchmarks/ time ours against some of them."""
