"""Symbols, ids, separators and file names shared by every module (one place, no magic strings)."""

# Moses phrase-table fields are separated by exactly this byte string (docs/moses-formats.md §1.1).
FIELD_SEP = " ||| "
FIELD_SEP_B = b" ||| "

# Vocabulary ids (docs/model.md §1.1, docs/contracts.md §3): 0 reserved (padding / "no previous
# word"), 1 UNK, 2..N-1 words by frequency, EOS = N, a separate id after the shortlist.
PAD_ID = 0
UNK_ID = 1
FIRST_WORD_ID = 2
PAD_SYMBOL = "<pad>"
UNK_SYMBOL = "<unk>"
EOS_SYMBOL = "</s>"

# Moses takes ln() of every dense score and floors it at LOWEST_SCORE (moses/TypeDef.h:67).
LOGP_FLOOR = -100.0

# Model directory layout.
CONFIG_FILE = "config.json"
SRC_VOCAB_FILE = "vocab.src.json"
TGT_VOCAB_FILE = "vocab.tgt.json"
WEIGHTS_FILE = "model.safetensors"
PROVENANCE_FILE = "provenance.json"
TRAIN_LOG_FILE = "train.log.jsonl"
TRAIN_STATE_FILE = "train-state.pt"

# What a model conditions on (config.json "direction"; absent: forward): forward scores
# p(target | source), inverse p(source | target) (its encoder reads the table's target phrase).
FORWARD, INVERSE = "forward", "inverse"
DIRECTIONS = (FORWARD, INVERSE)

# gzip magic bytes: input compression is detected by content, not by name.
GZIP_MAGIC = b"\x1f\x8b"
DEFAULT_GZIP_LEVEL = 1
