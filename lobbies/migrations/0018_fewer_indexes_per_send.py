"""Fewer indexes written per send: a send wrote ~33 pages to the WAL, one or more for each
index of its message and delivery rows (benchmarks/send_throughput.py, docs/PERFORMANCE.md).

Five single-column foreign-key indexes are dropped, each the leading column of a constraint
or composite index that serves the same lookups (and the foreign keys' own checks):
message.lobby (message_sequence_unique), message.sender (message_request_unique),
message.schedule (message_schedule_slot_unique, whose condition a `schedule_id = x` lookup
implies), delivery.message (delivery_unique), delivery.recipient (delivery_inbox).
message.cancelled_at's index becomes partial: retention's sweep reads only cancelled ones,
and the rest no longer write an entry for their NULL.

The indexes are dropped by name rather than by Django's AlterField, which on SQLite rebuilds
the whole table: that would copy every message and lose the search triggers of 0013.
"""

import django.db.models.deletion
from django.db import migrations, models

# (model, field) whose own index is dropped.
UNINDEXED = (
    ("message", "lobby"),
    ("message", "sender"),
    ("message", "schedule"),
    ("message", "cancelled_at"),
    ("delivery", "message"),
    ("delivery", "recipient"),
)


def _indexes(apps, schema_editor):
    for model_name, field_name in UNINDEXED:
        model = apps.get_model("lobbies", model_name)
        field = model._meta.get_field(field_name)
        yield model, field, schema_editor._create_index_name(model._meta.db_table, [field.column])


def drop_indexes(apps, schema_editor):
    for _, _, name in _indexes(apps, schema_editor):
        schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")


def restore_indexes(apps, schema_editor):
    for model, field, name in _indexes(apps, schema_editor):
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {schema_editor.quote_name(name)} ON "
            f"{schema_editor.quote_name(model._meta.db_table)} "
            f"({schema_editor.quote_name(field.column)})"
        )


class Migration(migrations.Migration):

    dependencies = [
        ("lobbies", "0017_attachments"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="delivery",
                    name="message",
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="deliveries", to="lobbies.message"),
                ),
                migrations.AlterField(
                    model_name="delivery",
                    name="recipient",
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="deliveries", to="lobbies.agent"),
                ),
                migrations.AlterField(
                    model_name="message",
                    name="cancelled_at",
                    field=models.DateTimeField(blank=True, null=True),
                ),
                migrations.AlterField(
                    model_name="message",
                    name="lobby",
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="messages", to="lobbies.lobby"),
                ),
                migrations.AlterField(
                    model_name="message",
                    name="schedule",
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="occurrences", to="lobbies.schedule"),
                ),
                migrations.AlterField(
                    model_name="message",
                    name="sender",
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="sent_messages", to="lobbies.agent"),
                ),
            ],
            database_operations=[migrations.RunPython(drop_indexes, restore_indexes)],
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(condition=models.Q(("cancelled_at__isnull", False)), fields=["cancelled_at"], name="message_cancelled"),
        ),
    ]
