"""decode_kinds: a beam step's profiled ops grouped by kind, against a hand count."""

import json

from benchmarks.peers import decode_kinds

BODY = 'jit(decode)/while/body/Transformer.decode/decoder/layer_0'
OPS = [
    ['ynn_fusion.1', f'{BODY}/ffn_block/ffn/wi/dot_general', 'layers.py:FeedForward', 3.0],
    ['ynn_fusion.2', f'{BODY}/self_attention_block/self_attention/query/dot_general', '', 1.0],
    ['gather_bitcast_fusion.3', f'{BODY}/self_attention/self_attention._cached_step/gather',
     'multi_head_attention.py:_ancestors.<locals>.<genexpr>:308', 2.0],
    ['ynn_fusion.4', 'jit(decode)/while/body/Transformer.decode/decoder/shared_embedding.attend'
     '/...d,dv->...v/dot_general', 'layers.py:SharedEmbedding.attend:146', 2.0],
    ['wrapped_reduce-window.5', '', '', 0.5],
    ['custom-call', 'jit(decode)/while/body/top_k', 'top_k.py:top_k:64', 1.0],
    ['ynn_fusion.6', 'jit(decode)/while/body/reduce_sum', 'search.py:_top_candidates:212', 0.5],
    ['ynn_fusion.7', 'jit(decode)/Transformer.encode/encoder/layer_0/ffn/wi/dot_general', '', 0.0],
]


def test_kinds_and_shares_add_up_to_the_ops():
  rows = {k: (n, share, us) for k, n, share, us in decode_kinds.by_kind(OPS, step_us=100.0)}
  assert rows['projections and FFN (GEMMs)'] == (2, 0.4, 40.0)
  assert rows['ancestry gather of the cache'] == (1, 0.2, 20.0)
  assert rows['vocabulary projection (GEMM)'] == (1, 0.2, 20.0)
  assert rows['layer norms'] == (1, 0.05, 5.0)
  assert rows['top-k'] == (1, 0.1, 10.0)
  assert rows['log-softmax normaliser'] == (1, 0.05, 5.0)
  assert rows['once a batch (encoder, cross keys/values)'][0] == 1
  assert abs(sum(share for _, share, _ in rows.values()) - 1.0) < 1e-12
  assert list(rows)[0] == 'projections and FFN (GEMMs)'  # largest first


def test_the_command_prints_the_last_records_table(tmp_path, capsys):
  path = tmp_path / 'p.jsonl'
  path.write_text(json.dumps({'ours': {'top_ops': OPS[:1]}}) + '\n' +
                  json.dumps({'ours': {'top_ops': OPS[2:3]}}) + '\n')
  decode_kinds.main([str(path), '--step-us', '10'])
  out = capsys.readouterr().out.splitlines()
  assert out[2] == '| ancestry gather of the cache | 1 | 100.0% | 10 |'
  assert len(out) == 3
