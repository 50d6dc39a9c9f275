"""Encoder-decoder models as pure functions over parameter dicts.

Empty for now: the models (bi-directional encoder, LSTM/GRU decoder, Luong and Bahdanau
attention, input feeding) arrive with the models-and-training issue (#3).
"""
