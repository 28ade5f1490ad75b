"""The frontend's parts: the CSV (cluster), the plan (plan), running it (running), stopping
and inspecting it (control), SSH (ssh), the run's keys (keys), tmux panes (tmux), mpirun
(mpi), one process's supervisor (logged) and its files read back (processes), the password
relay (relay), and the CLI (frontend)."""
