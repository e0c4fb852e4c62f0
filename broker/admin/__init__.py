"""Administration: configs as Kafka describes them (:mod:`.configs`), the broker's dynamic
configs (:mod:`.dynamic`), the changes admin requests make to a running broker
(:mod:`.changes`), and the ``chronolog topics`` / ``chronolog configs`` commands
(:mod:`.topics_cli`, :mod:`.configs_cli`, sharing :mod:`.tool`)."""
