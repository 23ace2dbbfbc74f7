"""trinity-rft: reinforcement fine-tuning of language models.

The explorer rolls out tasks with the current policy, workflows and reward functions
score them, the buffer stores the experiences, the trainer updates the policy, and the
synchronizer sends the new weights back to the explorer.

Importing trinity changes nothing process-wide: the tuning a run's own processes get
(huge pages for torch, OpenMP, the heap) is applied by ``trinity run`` to the processes
it starts (``trinity.launch.process_policy``).
"""

__version__ = "0.1.0"
