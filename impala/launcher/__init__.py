"""The frontend's parts: the CSV (cluster), SSH (ssh), tmux panes (tmux), mpirun (mpi)."""
