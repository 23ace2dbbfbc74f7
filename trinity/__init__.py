"""trinity-rft: reinforcement fine-tuning of language models.

The explorer rolls out tasks with the current policy, workflows and reward functions
score them, the buffer stores the experiences, the trainer updates the policy, and the
synchronizer sends the new weights back to the explorer.
"""

import os as _os

__version__ = "0.1.0"

# CPU tensors of 2 MiB and more on transparent huge pages (torch's allocator aligns them
# and madvises them): a bf16 train step of the default model took ~90k page faults
# without, ~20k with, and about a tenth less time. torch reads the variable once, at its
# first allocation, so it is set here, before any trinity module imports torch; Ray
# workers import trinity before torch too. THP_MEM_ALLOC_ENABLE=0 turns it off.
_os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
