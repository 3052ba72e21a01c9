"""Entry point of a peer worker process: ``python -m bench.peer_worker <peer> <target>``.

A separate module so that the peers' task registrations live in ``bench.peers`` (not ``__main__``) in
producer and worker alike: Huey and Procrastinate look tasks up by their module-qualified names.
"""

from bench.peers import main

if __name__ == "__main__":
    main()
