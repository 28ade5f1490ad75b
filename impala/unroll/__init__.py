"""The unroll's path from an actor to a loss, one module per job:

- `layout.py`: what an unroll holds, in its stored, continued and batch forms;
- `writer.py`: the actor's side, buffers filled step by step and sent per environment;
- `framestack.py`: Atari frames sent once, stacks rebuilt where they are used;
- `reader.py`: the learner's side, every message checked before it is used;
- `batches.py`: the learner's preallocated batches, and their tensors for an update;
- `replay_memory.py`: a prioritized memory of fixed-shape items (the sum tree);
- `replay.py`: a learner's replay of unrolls, mixed into each batch after the fresh ones;
- `replay_file.py`: that replay on disk beside the checkpoint.
"""
