"""Attachments (issue 14): content per SHA-256, attachments per uploader and name, their links
to messages and schedules, and pending uploads. New tables only: existing rows are untouched.
"""

from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('lobbies', '0016_messages_page_indexes'),
    ]

    operations = [
        migrations.CreateModel(
            name='AttachmentContent',
            fields=[
                ('sha256', models.CharField(max_length=64, primary_key=True, serialize=False)),
                ('size', models.PositiveBigIntegerField()),
                ('media_type', models.CharField(max_length=100)),
                ('created_at', models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name='Attachment',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('sha256', models.CharField(max_length=64)),
                ('name', models.CharField(max_length=255)),
                ('media_type', models.CharField(max_length=100)),
                ('size', models.PositiveBigIntegerField()),
                ('created_at', models.DateTimeField()),
                ('expired_at', models.DateTimeField(blank=True, db_index=True, null=True)),
                ('lobby', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='attachments', to='lobbies.lobby')),
                ('uploader', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='attachments', to='lobbies.agent')),
            ],
        ),
        migrations.CreateModel(
            name='MessageAttachment',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('position', models.PositiveSmallIntegerField()),
                ('attachment', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='message_links', to='lobbies.attachment')),
                ('message', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='attachment_links', to='lobbies.message')),
            ],
        ),
        migrations.CreateModel(
            name='PendingUpload',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('sha256', models.CharField(max_length=64)),
                ('size', models.PositiveBigIntegerField()),
                ('created_at', models.DateTimeField(db_index=True)),
                ('lobby', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='pending_uploads', to='lobbies.lobby')),
                ('uploader', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='pending_uploads', to='lobbies.agent')),
            ],
        ),
        migrations.CreateModel(
            name='ScheduleAttachment',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('position', models.PositiveSmallIntegerField()),
                ('attachment', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='schedule_links', to='lobbies.attachment')),
                ('schedule', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='attachment_links', to='lobbies.schedule')),
            ],
        ),
        migrations.AddIndex(
            model_name='attachment',
            index=models.Index(fields=['sha256'], name='attachment_sha256'),
        ),
        migrations.AddConstraint(
            model_name='attachment',
            constraint=models.UniqueConstraint(condition=models.Q(('expired_at__isnull', True)), fields=('uploader', 'sha256', 'name', 'media_type'), name='attachment_live_unique'),
        ),
        migrations.AddConstraint(
            model_name='messageattachment',
            constraint=models.UniqueConstraint(fields=('message', 'position'), name='message_attachment_unique'),
        ),
        migrations.AddIndex(
            model_name='pendingupload',
            index=models.Index(fields=['sha256'], name='pending_upload_sha256'),
        ),
        migrations.AddConstraint(
            model_name='pendingupload',
            constraint=models.UniqueConstraint(fields=('uploader', 'sha256'), name='pending_upload_unique'),
        ),
        migrations.AddConstraint(
            model_name='scheduleattachment',
            constraint=models.UniqueConstraint(fields=('schedule', 'position'), name='schedule_attachment_unique'),
        ),
    ]
