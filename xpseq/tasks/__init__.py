"""Tasks and the experiments run on them.

================  ==========================================================================
module            contents
================  ==========================================================================
``experiment``    Task, toy_task, task_from_pairs, train_model, translate, bucket tables
``g2p_recipe``    grapheme-to-phoneme on the CMU Pronouncing Dictionary: recipe, evaluation
``metrics``       BLEU (sacrebleu), exact match, edit distance, PER / WER, text tables
``rot13``         rot13_task: random letter strings thousands of letters long and their ROT13
``translator``    the front door: Translator (train, translate, evaluate, save) and load
================  ==========================================================================
"""

from .experiment import (
    Task,
    attention_labels,
    bucket_table,
    decoder_inputs,
    model_config,
    score,
    task_from_pairs,
    timed_search_comparison,
    toy_task,
    train_model,
    translate,
)
from .rot13 import rot13_task

__all__ = ["Task", "toy_task", "task_from_pairs", "model_config", "train_model", "translate",
           "attention_labels", "score", "bucket_table", "timed_search_comparison",
           "decoder_inputs", "rot13_task"]
