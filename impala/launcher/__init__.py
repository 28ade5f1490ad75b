"""The frontend's parts: the CSV (cluster), the plan (plan), running it (running), stopping
and inspecting it (control), SSH (ssh), the run's keys (keys), tmux panes (tmux), mpirun
(mpi), one process's wrapper (logged), the password relay (relay), and the CLI (frontend)."""
