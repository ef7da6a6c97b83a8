"""Read NCCL_DEBUG=INFO logs and nccl-tests output and say what happened, and whether it is the fast path.

    python -m tools.ncclcheck LOG... [--expect TRANSPORT] [--min-busbw GBPS] [--warn-busbw GBPS] [--ranks N]
                              [--section NODES[/OVER]] [--bootstrap IFACE] [--rails N] [--allow-no-gdr]
                              [--format text|json]

TRANSPORT is one a fabric kind of components/fabric/kinds.py names, `local`, or `mnnvl` (`-h` lists them).

Reports the transport each channel used (NET/IB with or without GDRDMA, the HPC-X plugin's NET/IBext*, aws-ofi-nccl's
NET/Libfabric, NET/AWS Libfabric and NET/OFI, a kind's own net plugin's modules (kinds.py `net_modules`), NET/Socket,
P2P, SHM), whether any rank fell back to Socket, nranks and
how many ranks reached "Init COMPLETE", the NCCL version, the average and peak bus bandwidth with the message size at
the peak, the NICs NCCL's IB transport found (the longest list one process printed; under --rails also the NET
devices the channel lines used), and failure lines: known ones with their cause and knob, quoting the first line
that showed each (RDMA completion errors by their ibv_wc_status code), and every NCCL WARN it has no rule for,
quoted. RoCE is told from InfiniBand by the link layer of the
devices NCCL lists (`mlx5_0:1/RoCE`), whichever verbs module (IB, IBext_v8, ...) drives them.

It judges what the log shows and says what it cannot show: `gdr` is null when no NET channel line is in the log,
the transport `unknown` when no line names it. A multi-node run (init lines of two hosts, or `nNodes` above 1) whose
excerpt shows only P2P channels used the network its `Using network` line names, not `local`; `NET/IB : No device
found` fails a run only where RDMA was expected. An NCCL WARN no rule knows fails the run, unless the nccl-tests
summary that follows shows the run finished (then `warn`). Exit 0 (`pass`, or `warn` under --warn-busbw but above
the floor) when every check asked for holds: the expected transport (with GPUDirect RDMA on RDMA fabrics), every
expected rank initialised, no failure line, the peak bus bandwidth at the floor, NCCL's bootstrap on the interface
--bootstrap names, a NIC for each of the --rails in every process's IB device list (`NET/IB : Using`, from which
NCCL leaves out ports that are not ACTIVE and NICs NCCL_IB_HCA filters out). Exit 1 with `fail`, the likely cause
and the knob, when the log shows a check failing; exit 1 with `incomplete` when a check asked for cannot be judged
because its lines are not in this log (nccl-tests output without NCCL INFO lines has bandwidth but no transport; a
cut log has no results table). What was not asked for and is not in the log is only reported. Exit 2 when a log
cannot be read.

Logs are read in blocks of whole lines, in bounded memory whatever their size; prefixes that launchers and log
collectors put before each line (Open MPI `[1,0]<stdout>:`, `kubectl logs --timestamps` and `--prefix`, NCCL's own
`[%F %T]` timestamps, Slurm `--label`) are ignored. --section N reads only the N-node run of a fastpath acceptance log
(between its marker lines); --section N/nvlink its N-node run over multi-node NVLink.

Multi-node NVLink (GB200/GB300 NVL72): a multi-node run whose connections are all `P2P/MNNVL` is `mnnvl` (NCCL's
communicator line says `MNNVL 1`; the whole clique counts as one NCCL node). Under `--expect mnnvl` a run that went
over the network fails with why NCCL left MNNVL off (NCCL_MNNVL_ENABLE=0, cuMem off, a GPU's fabric registration
not complete, another clique); under a network `--expect` a run over MNNVL fails: it measured NVLink, not the
network.

The package, in the order a log goes through it: parse.py (what one line says: the line grammar and the `Report`),
bulk.py (the block reader, which judges each distinct line shape once with the grammar), judge.py (the verdict from
a report, with expectations read off components/fabric/kinds.py), cli.py (options, output, exit code).
"""
