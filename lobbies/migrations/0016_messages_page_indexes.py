"""The messages page's filtered views read newest first from an index and stop after a page:
an agent's sends (sender, sequence) and copies (recipient, message), a room's messages and a
kind's, the last two partial so messages without a room or a kind pay nothing."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('lobbies', '0015_connection_transport'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='delivery',
            index=models.Index(fields=['recipient', 'message'], name='delivery_recipient_message'),
        ),
        migrations.AddIndex(
            model_name='message',
            index=models.Index(fields=['sender', 'sequence'], name='message_sender_sequence'),
        ),
        migrations.AddIndex(
            model_name='message',
            index=models.Index(condition=models.Q(('scope', 'room')), fields=['lobby', 'room_name', 'sequence'], name='message_room'),
        ),
        migrations.AddIndex(
            model_name='message',
            index=models.Index(condition=models.Q(('kind__isnull', False)), fields=['lobby', 'kind', 'sequence'], name='message_kind'),
        ),
    ]
