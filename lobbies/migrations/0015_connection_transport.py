# Transport facts of a bridge connection (issue 15): channel or tmux, and held notices.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('lobbies', '0013_history_search'),
    ]

    operations = [
        migrations.AddField(
            model_name='connection',
            name='held_reason',
            field=models.CharField(blank=True, default='', max_length=200),
        ),
        migrations.AddField(
            model_name='connection',
            name='held_since',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='connection',
            name='transport',
            field=models.CharField(choices=[('channel', 'Channel'), ('tmux', 'Tmux')], default='channel', max_length=16),
        ),
        migrations.AddConstraint(
            model_name='connection',
            constraint=models.CheckConstraint(condition=models.Q(('transport__in', ['channel', 'tmux'])), name='connection_transport'),
        ),
    ]
