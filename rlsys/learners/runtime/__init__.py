"""The learner's Ray side: the learner actor, the group of them the driver drives, how a group's processes meet,
and the replay-buffer actor read as an algorithm's history. Everything else in rlsys.learners knows no Ray."""
