"""Rolling out tasks: the explorer loop, its engines and runners, evaluation, modes bench and serve."""
