"""The hidden check of a HumanEvalFix-shaped task, run in the sandbox by its python3 (standard
library only; copied whole into the scoring folder, so nothing here imports the harness).

Two processes. The checker (checker.py) holds the dataset's test, the helpers the task's reference
code defines and the harness's report pipe, and never imports the code under test. The worker
(worker.py), its child, imports the module and carries out what the test asks of it. What crosses
between them: codec.py (the format, and how objects go out), decode.py (how they come back in),
wire.py (the messages and the news of lent containers), rebuild.py (what the checker trusts: why a
module cannot hand the test an object of its own making that decides a comparison). probe.py runs
the test the old way for a module that failed, to tell whether its own top-level names would have
bent the test.

Why values cross this way: a test should see what it would see with the function in its own
process (objects of its own classes passed in and changed in place, the very object it passed
returned, generators it only slices, exceptions with their real types, standard-library values),
while nothing that reaches a comparison may carry the module's code. So values are rebuilt here by
trusted constructors, the test's own objects never leave (the worker holds proxies whose every use
is a request the checker carries out on them), and the worker's other objects arrive as proxies
that answer with data but compare by identity.
"""
