"""trinity-rft: reinforcement fine-tuning of language models.

The explorer rolls out tasks with the current policy, workflows and reward functions
score them, the buffer stores the experiences, the trainer updates the policy, and the
synchronizer sends the new weights back to the explorer.
"""

__version__ = "0.1.0"
