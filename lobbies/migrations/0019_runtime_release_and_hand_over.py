# Issue 27: a conversation that ended cleanly releases its agent; a refused new conversation
# waits for the owner's hand over (which, since when, last asked).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('lobbies', '0018_fewer_indexes_per_send'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='auditevent',
            name='audit_action',
        ),
        migrations.AddField(
            model_name='agent',
            name='runtime_released_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='agent',
            name='waiting_runtime_id',
            field=models.CharField(blank=True, max_length=36, null=True),
        ),
        migrations.AddField(
            model_name='agent',
            name='waiting_seen_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='agent',
            name='waiting_since',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='auditevent',
            name='action',
            field=models.CharField(choices=[('lobby_created', 'Lobby Created'), ('lobby_deleted', 'Lobby Deleted'), ('agent_added', 'Agent Added'), ('agent_removed', 'Agent Removed'), ('agent_disabled', 'Agent Disabled'), ('agent_enabled', 'Agent Enabled'), ('credential_rotated', 'Credential Rotated'), ('runtime_reset', 'Runtime Reset'), ('runtime_claimed', 'Runtime Claimed'), ('runtime_resumed', 'Runtime Resumed'), ('runtime_taken_over', 'Runtime Taken Over'), ('runtime_released', 'Runtime Released'), ('runtime_handed_over', 'Runtime Handed Over'), ('role_set', 'Role Set'), ('room_created', 'Room Created'), ('room_members_changed', 'Room Members Changed'), ('room_deleted', 'Room Deleted'), ('room_archived', 'Room Archived'), ('room_restored', 'Room Restored'), ('agents_rested', 'Agents Rested'), ('account_created', 'Account Created'), ('account_disabled', 'Account Disabled'), ('account_enabled', 'Account Enabled'), ('owner_set', 'Owner Set'), ('viewer_added', 'Viewer Added'), ('viewer_removed', 'Viewer Removed'), ('visibility_changed', 'Visibility Changed'), ('summary_settings_changed', 'Summary Settings Changed'), ('agent_appearance_changed', 'Agent Appearance Changed'), ('notes_source_changed', 'Notes Source Changed'), ('repository_approved', 'Repository Approved'), ('repository_withdrawn', 'Repository Withdrawn'), ('restore_started', 'Restore Started'), ('restore_finished', 'Restore Finished'), ('permissions_changed', 'Permissions Changed'), ('notifications_retried', 'Notifications Retried'), ('scheduled_cancelled', 'Scheduled Cancelled'), ('delivery_paused', 'Delivery Paused'), ('delivery_resumed', 'Delivery Resumed'), ('owner_message_sent', 'Owner Message Sent')], max_length=40),
        ),
        migrations.AddConstraint(
            model_name='auditevent',
            constraint=models.CheckConstraint(condition=models.Q(('action__in', ['lobby_created', 'lobby_deleted', 'agent_added', 'agent_removed', 'agent_disabled', 'agent_enabled', 'credential_rotated', 'runtime_reset', 'runtime_claimed', 'runtime_resumed', 'runtime_taken_over', 'runtime_released', 'runtime_handed_over', 'role_set', 'room_created', 'room_members_changed', 'room_deleted', 'room_archived', 'room_restored', 'agents_rested', 'account_created', 'account_disabled', 'account_enabled', 'owner_set', 'viewer_added', 'viewer_removed', 'visibility_changed', 'summary_settings_changed', 'agent_appearance_changed', 'notes_source_changed', 'repository_approved', 'repository_withdrawn', 'restore_started', 'restore_finished', 'permissions_changed', 'notifications_retried', 'scheduled_cancelled', 'delivery_paused', 'delivery_resumed', 'owner_message_sent'])), name='audit_action'),
        ),
    ]
