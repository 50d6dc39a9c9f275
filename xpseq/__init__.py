"""xpseq: seq2seq with attention on the array API standard."""
